"""What a file's text must contain before it is worth parsing: the screens
that run on every file, kept free of libcst so that a file no rule wants
(and a warm run from the cache) never imports it."""

from __future__ import annotations

import re

from memlint.analysis.torch_api import SETS_CURRENT_DEVICE

#: Calls that set CUDA_VISIBLE_DEVICES in the environment.
SETS_ENVIRONMENT = frozenset({"os.environ.setdefault", "os.putenv"})
#: The environment variable that hides every GPU but the chosen ones.
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
#: The last parts of both: a cheap screen before qualifying a call.
DEVICE_SETTER_TAILS = tuple(sorted({q.rsplit(".", 1)[-1]
                                    for q in SETS_CURRENT_DEVICE | SETS_ENVIRONMENT}))

#: Text every GPU selection contains, lower-cased: a rank variable or launcher
#: variable, a GPU index name, `f"cuda:{i}"`, a process group.
SELECTION_MARKERS = ("rank", "gpu", "device_id", "cuda:", "slurm_localid",
                     "init_process_group", "deepspeed", "elastic_launch",
                     '"cuda" in ', "'cuda' in ", "startswith(\"cuda", "startswith('cuda")
#: Text every use of the current CUDA device contains: `.cuda()` or
#: `.cuda(keyword=...)`, a `"cuda"` string (also where a name is bound to
#: it), the context-making calls, a torch.cuda tensor type.
_DEFAULT_USE_MARKER = re.compile(r"""\.cuda\(\s*(?:\)|\w+\s*=)|["']\s*(?i:cuda)\s*["']|"""
                                 r"""synchronize|mem_get_info|Stream|cuda\.\w*Tensor|"""
                                 r"""torch\.cuda import""")


def may_use_default_device(source: str) -> bool:
    """Whether `source` could hold a use of the current CUDA device
    (`gpu_selection.default_device_use`)."""
    return _DEFAULT_USE_MARKER.search(source) is not None


def may_select_and_use_default_device(source: str, lowered: str) -> bool:
    """MEM008's screen: a GPU chosen per process and the default one used."""
    return any(k in lowered for k in SELECTION_MARKERS) and may_use_default_device(source)


def sets_a_device_maybe(source: str) -> bool:
    """Whether the file may define a helper that makes a GPU current (a fact
    other files' MEM008 asks for, found only by walking the file)."""
    return CUDA_VISIBLE in source or any(tail in source for tail in DEVICE_SETTER_TAILS)


def gives_facts_maybe(source: str) -> bool:
    """Whether a file no rule wants must still be walked for what it tells
    other files: a helper that makes a GPU current (MEM008), a model's
    `forward` (what it returns at each position, for MEM003)."""
    return sets_a_device_maybe(source) or "def forward" in source
