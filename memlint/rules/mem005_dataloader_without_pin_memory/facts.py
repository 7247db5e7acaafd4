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


@dataclass(frozen=True)
class UnlessEveryCallerDropsIt(Condition):
    """A loader its function returns at `position` of a tuple: dropped when
    other files call that function and every call unpacks the loader into a
    name it never reads (`train_loader, unused_loader, ... = make_loaders()`):
    no batch of it is ever loaded."""

    module: str
    function: str
    position: int

    def drops(self, project: Project) -> bool:
        return project.dropped_by_every_caller(self.module, self.function, self.position)
