"""Tree rewrites the rules' fixes share: libcst changes one node and keeps
every other character as the user wrote it."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.names import call_arg


def with_keyword(call: cst.Call, keyword: str, value: str, position: int | None = None) -> cst.Call:
    """`f(a)` -> `f(a, keyword=value)`; `f(a, keyword=x)` (or the argument at
    `position`) -> `f(a, keyword=value)`. A call laid out one argument per
    line with a trailing comma keeps that layout."""
    new_value = cst.parse_expression(value)
    existing = call_arg(call, keyword, position)
    if existing is not None:
        return call.with_changes(args=[
            arg.with_changes(value=new_value) if arg is existing else arg for arg in call.args])
    arg = cst.Arg(value=new_value, keyword=cst.Name(keyword),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    args = list(call.args)
    if args and isinstance(args[-1].comma, cst.Comma):
        # `f(\n    a,\n)`: the new argument takes the trailing comma and its
        # line break; `a` gets a comma followed by the same break and indent
        last = args[-1]
        arg = arg.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=_between_arguments(call)))
    return call.with_changes(args=[*args, arg])


def _between_arguments(call: cst.Call) -> cst.BaseParenthesizableWhitespace:
    """What goes after a comma between two arguments: in a call laid out one
    argument per line, the break and indentation before the first argument
    (the one before the closing bracket is the bracket's own), else a space."""
    before = call.whitespace_before_args
    return before if isinstance(before, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
