"""What MEM005 waits on from other files."""

from __future__ import annotations

from dataclasses import dataclass

from memlint.analysis.project import Condition, Project


@dataclass(frozen=True)
class UnlessOnlyCalledHere(Condition):
    """A module whose every copy to a GPU goes to a `device` parameter that
    defaults to the CPU (`def train(..., device="cpu")`) and that no caller
    in its own file sets to a GPU: dropped unless another file calls one of
    those functions (with a device this file cannot see)."""

    module: str
    functions: tuple[str, ...]

    def drops(self, project: Project) -> bool:
        return not any(project.calls_of(self.module, function) for function in self.functions)
