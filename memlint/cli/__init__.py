"""Front ends: the command line, its reporters and rule pages, the
`[tool.memlint]` configuration, and the flake8 plugin."""
