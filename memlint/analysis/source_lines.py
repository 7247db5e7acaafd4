"""Python's line ends, the one definition every reader of source lines uses."""

from __future__ import annotations

import re

#: `\r\n`, `\r` or `\n`; str.splitlines() also splits on form feeds and others,
#: which Python does not end a line on
LINE_BREAK = re.compile(r"\r\n|\r|\n")
