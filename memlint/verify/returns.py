"""Call back once a given frame returns, at no cost to other code: through
sys.monitoring on that one code object (Python 3.12+), else a profile hook
(function frames only, where it ends soon)."""

from __future__ import annotations

import os
import sys
from typing import Callable

MEMLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

TOOL_ID = 4  # a sys.monitoring id that debuggers, coverage tools and profilers leave free


def user_frame():
    """The innermost frame that is not memlint's own: the probed statement's."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(MEMLINT_DIR):
        frame = frame.f_back
    return frame


class ReturnWatcher:
    """`on_return()` runs when `frame` returns or yields; `cancel()` stops
    watching without calling it. `active` says whether a watch was placed."""

    def __init__(self, frame, on_return: Callable[[], None]) -> None:
        self.frame = frame
        self.code = frame.f_code
        self.on_return = on_return
        self.active = False
        self.previous_profile = None
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            if monitoring.get_tool(TOOL_ID) is None:
                monitoring.use_tool_id(TOOL_ID, "memlint verify")
            for event in (monitoring.events.PY_RETURN, monitoring.events.PY_YIELD):
                monitoring.register_callback(TOOL_ID, event, self._monitored)
            monitoring.set_local_events(TOOL_ID, self.code, monitoring.events.PY_RETURN
                                        | monitoring.events.PY_YIELD)
            self.active = True
        elif self.code.co_name != "<module>":
            self.previous_profile = sys.getprofile()
            sys.setprofile(self._profiled)
            self.active = True

    def _monitored(self, code, _offset, _value):
        if code is self.code:
            self._fire()

    def _profiled(self, frame, event, arg):
        if frame is self.frame and event == "return":
            self._fire()
        elif self.previous_profile is not None:
            self.previous_profile(frame, event, arg)

    def _fire(self) -> None:
        if self.active:
            self.cancel()
            self.on_return()

    def cancel(self) -> None:
        if not self.active:
            return
        self.active = False
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None:
            monitoring.set_local_events(TOOL_ID, self.code, 0)
        else:
            sys.setprofile(self.previous_profile)
