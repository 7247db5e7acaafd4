"""MEM000 syntax-error: a file that cannot be read, decoded or parsed.

The engine reports it, not a rule; this package holds its page."""
