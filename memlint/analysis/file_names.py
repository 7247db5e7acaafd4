"""Whether two file names a program spells can name the same file: exactly,
or as patterns with `*` for what a path built at run time does not show
(`finetune_*_0.pkl` read, `finetune_*_*.pkl` written). Kept free of the
analysis's other modules: the project's conditions and the rules' walk both
ask it."""

from __future__ import annotations

import functools


def same_file(named: str, other: str) -> bool:
    """Whether two file names, either with `*` for what is not known, can
    name the same file (`finetune_*_0.pkl` and `finetune_*_*.pkl`)."""
    if "*" not in named and "*" not in other:
        return named == other

    @functools.cache
    def from_(i: int, j: int) -> bool:
        if i == len(named) or j == len(other):
            return set(named[i:] + other[j:]) <= {"*"}
        if named[i] == "*":
            return from_(i + 1, j) or from_(i, j + 1)
        if other[j] == "*":
            return from_(i, j + 1) or from_(i + 1, j)
        return named[i] == other[j] and from_(i + 1, j + 1)

    return from_(0, 0)

