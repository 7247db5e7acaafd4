"""memlint's version: one place, read by the package, the cache key and the build."""

__version__ = "0.1.0"
