"""Is this expression MEM001's whole data set? The evidence the rule weighs
for what a move puts on the GPU: read from disk, a data frame, a data-like
name (strong or weak), or known not to be a data set (a batch, a literal,
noise, a constant)."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import (NONE, SPLITS, STRONG, UNKNOWN, WEAK, name_evidence,
                                       name_words, reads_whole_file)
from memlint.analysis.devices import cuda_tensor_type
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import SAME_DATA_CALLS
from memlint.rules.mem001_whole_dataset_to_device.facts import (
    _SAME_DATA_METHODS, _is_literal, _leading_axis, _literal_rows, _moves_itself, _names_in,
    _sizes_only, _unimported_torch, _value_given)

#: Index names that pick a mini-batch or one sample out of the data.
_BATCH_INDEX_WORDS = {"i", "j", "k", "b", "idx", "idxs", "index", "indices", "ix", "batch",
                      "ids", "sample", "mb", "minibatch", "start", "end", "perm"}
#: Data-frame methods whose result is a summary, not the data.
_REDUCTIONS = {"max", "min", "mean", "sum", "std", "var", "median", "count", "nunique",
               "describe", "head", "tail", "sample", "value_counts", "unique", "corr",
               "cov", "quantile", "mode", "first", "last", "idxmax", "idxmin"}


def data_evidence(ctx: Context, node: cst.BaseExpression, depth: int = 0) -> int:
    """NONE (known not to be a data set), UNKNOWN, WEAK (a data-like name) or
    STRONG (read from disk, a data frame, a name like `X_train`)."""
    if depth > 8:
        return UNKNOWN
    if isinstance(node, cst.Call):
        return call_evidence(ctx, node, depth)
    if isinstance(node, cst.Attribute):
        if node.attr.value == "values":
            return frame_evidence(ctx, node.value, depth)  # `df.values`
        if node.attr.value in ("T", "mT", "data"):
            inner = data_evidence(ctx, node.value, depth + 1)
            if inner != UNKNOWN:
                return inner
    if isinstance(node, cst.Subscript):
        if picks_a_batch(node):
            return NONE
        return data_evidence(ctx, node.value, depth + 1)
    if isinstance(node, cst.BinaryOperation):  # `torch.ones(n) * -1`, `(X - mean) / std`
        return max(data_evidence(ctx, node.left, depth + 1),
                   data_evidence(ctx, node.right, depth + 1))
    name = dotted_name(node)
    if name is None:
        return NONE if _is_literal(node) else UNKNOWN
    if ctx.loop_target(name.split(".", 1)[0]) is not None:
        return NONE  # `for x, y in loader:` -- one batch
    bound = ctx.binding(name)
    site = ctx.binding_site(name)
    if site is not None:
        # `x = x.to(device)`, `x, y = x.to(d), y.to(d)`: what x was before it moved
        while site.previous is not None and _moves_itself(_value_given(site), name):
            site = site.previous
        bound = _value_given(site)  # `images, labels = next(iter(loader))`: the call
    if bound is not None and bound is not node:
        from_binding = data_evidence(ctx, bound, depth + 1)
        if from_binding != UNKNOWN:
            return from_binding
    if name.isupper() and len(name) > 1:
        return NONE  # a constant such as MEAN, defined elsewhere
    return name_evidence(name)


def call_evidence(ctx: Context, node: cst.Call, depth: int) -> int:
    # `torch.zeros` where torch came in through another module's `import *`
    qualified = ctx.qualify(node.func) or _unimported_torch(node.func)
    if reads_whole_file(qualified):
        return STRONG
    if qualified in SAME_DATA_CALLS or cuda_tensor_type(node.func, ctx):
        if not node.args or _sizes_only(node, qualified):
            return NONE  # `torch.LongTensor(bptt, bsz)`: an empty buffer of that shape
        return data_evidence(ctx, node.args[0].value, depth + 1)
    if qualified.startswith(("torch.", "numpy.")):
        return NONE  # torch.randn, torch.zeros, nn.Linear(...), np.random.rand ...
    func = node.func
    if isinstance(func, cst.Attribute):
        if func.attr.value == "to_numpy":
            return frame_evidence(ctx, func.value, depth)
        if func.attr.value == "unsqueeze" and _leading_axis(node):
            return NONE  # `transform(image).unsqueeze(0)`: one sample made a batch of one
        if func.attr.value in _SAME_DATA_METHODS:
            return data_evidence(ctx, func.value, depth + 1)
        if func.attr.value in ("sample", "next", "__next__"):
            return NONE  # a replay-buffer / data-frame sample, an iterator's next batch
    if isinstance(func, cst.Name) and func.value in ("next", "iter"):
        return NONE  # one batch of a loader
    return UNKNOWN


def frame_evidence(ctx: Context, frame: cst.BaseExpression, depth: int) -> int:
    """`df.values`, `df[cols].to_numpy()`: a data frame's contents, unless the
    frame is a reduction (`stats.max().values`) or one row of a loop."""
    if isinstance(frame, cst.Call) and isinstance(frame.func, cst.Attribute) \
            and frame.func.attr.value in _REDUCTIONS:
        return NONE
    inner = data_evidence(ctx, frame, depth + 1)
    return NONE if inner == NONE else max(inner, WEAK)


def picks_a_batch(node: cst.Subscript) -> bool:
    """`X[i:i + bs]`, `data[idx]`, `x_val[:32]`: some rows picked by an index
    or a literal bound, not the split."""
    first = node.slice[0].slice if node.slice else None
    if isinstance(first, cst.Slice) and any(
            isinstance(bound, cst.Integer) for bound in (first.lower, first.upper)):
        return True
    if isinstance(first, cst.Index) and _literal_rows(first.value):
        return True  # `dataset[0]`, `dataset[torch.tensor([1])]`: a row or two
    for element in node.slice:
        for name in _names_in(element.slice):
            words = set(name_words(name))
            if words & _BATCH_INDEX_WORDS and not words & SPLITS:
                return True
    return False
