"""Every `torch.*` name memlint reasons about exists in the torch it was
checked against, so an upgrade that moves one fails here, not in findings."""

from __future__ import annotations

import importlib

import pytest

from memlint.analysis import torch_api

torch = pytest.importorskip("torch", reason="torch is needed to check its API names")


def _torch_names() -> list[str]:
    names = set()
    for value in vars(torch_api).values():
        if isinstance(value, (frozenset, dict)) and all(isinstance(v, str) for v in value):
            names |= {name for name in value if name.startswith("torch.")}
    names |= {f"torch.{name}" for name in torch_api.STAR_EXPORTS["torch"]}
    names |= {f"torch.utils.data.{name}" for name in torch_api.STAR_EXPORTS["torch.utils.data"]}
    names |= {f"torch.cuda.{name}" for name in torch_api.CUDA_TENSOR_TYPES}
    return sorted(names)


def _resolve(qualified: str) -> object:
    parts = qualified.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(qualified)


def test_the_names_were_checked_against_the_installed_release():
    assert torch.__version__.split("+")[0] == torch_api.CHECKED_AGAINST, \
        "check the names below against this torch, then update CHECKED_AGAINST"


@pytest.mark.parametrize("qualified", _torch_names())
def test_each_torch_name_exists(qualified):
    assert _resolve(qualified) is not None
