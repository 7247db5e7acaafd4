"""The engine: one parse and one walk per file, many files in parallel.

Front ends (the CLI, the flake8 plugin, verify) call it; it runs the rules,
which ask the analyses.
"""

from memlint.engine.paths import (NOTEBOOK_SUFFIX, PYTHON_SUFFIXES, Report, Source,
                                  check_file, check_paths, check_sources, discover,
                                  discover_sources, size_limit)
from memlint.engine.source import check_source, decode
from memlint.engine.syntax import RuleCrash, syntax_error

__all__ = ["NOTEBOOK_SUFFIX", "PYTHON_SUFFIXES", "Report", "RuleCrash", "Source", "check_file",
           "check_paths", "check_source", "check_sources", "decode", "discover",
           "discover_sources", "size_limit", "syntax_error"]
