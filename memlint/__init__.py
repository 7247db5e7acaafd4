"""memlint: find GPU-memory anti-patterns in PyTorch code, and prove them on a GPU."""

from memlint.engine import Report, check_paths, check_source
from memlint.engine.settings import Settings
from memlint.finding import Finding, InternalError, Related
from memlint.version import __version__

__all__ = ["Finding", "InternalError", "Related", "Report", "Settings", "check_paths",
           "check_source", "__version__"]
