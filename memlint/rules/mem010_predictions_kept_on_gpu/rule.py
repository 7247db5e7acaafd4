"""Model outputs collected over a whole data set while still on the GPU."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from memlint.analysis.autograd_values import AutogradValues
from memlint.analysis.context import Context
from memlint.analysis.devices import device_of_value, made_by_a_forward
from memlint.analysis.models import built_kind, called_kind
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.project import UnlessProjectOnCpu
from memlint.analysis.names import dotted_name
from memlint.analysis.stores import (Store, StoresAt, code, container_name, iterates_data,
                                     outlived_loops, reads_across_batches, steps_through_data)
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions

#: Stores that grow with every iteration (a running sum keeps one tensor's size).
_GROWING = {"append", "extend with", "insert", "concatenate"}
#: What a value is reduced to per batch before it is kept: a label or a count
#: per sample, a scalar. Kept over a data set they stay small (8 bytes a
#: sample), so they are left alone; logits, probabilities, masks and features
#: (a row of numbers per sample) are not.
_SMALL_SUMMARIES = {"argmax", "argmin", "sum", "mean", "count_nonzero", "numel", "size",
                    "norm", "std", "var", "all", "any", "eq", "ne", "lt", "gt", "le", "ge",
                    "nonzero"}
_COMPARISONS = (cst.Comparison,)


class _Candidate(NamedTuple):
    store: Store
    statement: cst.CSTNode | None
    over: cst.CSTNode  # the loop across the data whose iterations it outlives
    grad_off: bool  # autograd is off where it is stored
    history: bool | None  # what MEM003's tracer says of the value
    function: cst.FunctionDef | None


class PredictionsKeptOnGpu(Rule):
    """Model outputs (or anything computed on the GPU) appended to a list or
    concatenated onto a tensor in a loop over a data set, while still on the
    GPU, under `torch.no_grad()` or detached: `all_logits.append(logits)`,
    `masks.append(torch.sigmoid(out))`, `feats = torch.cat([feats, z])`. GPU
    memory then grows with the size of the data set, not the batch, until the
    loop ends (and until the list is freed). Store `.cpu()` copies, or reduce
    each batch first (`argmax`, a count). Where autograd is on and the value
    has history, the same line is MEM003 (history kept)."""

    code = "MEM010"

    VALID = [
        # moved to the host before it is kept
        "import torch\npreds = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        preds.append(model(x.cuda()).cpu())",
        # the host copy made on an earlier line: follow the data
        "import torch\npreds = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        out = model(x.cuda()).detach().cpu()\n        preds.append(out)",
        # a label per sample: small
        "import torch\nlabels = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        labels.append(model(x.cuda()).argmax(1))",
        # rebuilt every iteration
        "import torch\nwith torch.no_grad():\n    for x, y in loader:\n        outs = []\n"
        "        outs.append(model(x.cuda()))",
        # a running sum keeps one tensor's size
        "import torch\ntotal = 0\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        total += model(x.cuda())",
        # with autograd on the history is MEM003's
        "import torch\nouts = []\nfor x, y in loader:\n    outs.append(model(x.cuda()))",
        # where the batch is cannot be told: said less
        "import torch\npreds = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        preds.append(model(x))",
        # numbers on the host
        "import torch\npreds = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        preds.extend(model(x.cuda()).argmax(1).tolist())",
        "import torch\nprobs = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        probs.append(torch.softmax(model(x.cuda()), 1).cpu().numpy())",
        # a correct count per batch
        "import torch\ncorrect = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        correct.append((model(x.cuda()).argmax(1) == y.cuda()).sum())",
    ]
    INVALID = [
        "import torch\nlogits_all = []\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        x = x.to('cuda')\n        logits_all.append(model(x))",
        "import torch\nmasks = []\nmodel.eval()\nwith torch.inference_mode():\n"
        "    for batch in test_loader:\n        out = model(batch.cuda())\n"
        "        masks.append(torch.sigmoid(out))",
        "import torch\nfeats = torch.empty(0, 128, device='cuda')\nwith torch.no_grad():\n"
        "    for x, _ in loader:\n        z = encoder(x.cuda())\n"
        "        feats = torch.cat([feats, z])",
        # detached keeps no graph, but the tensor is still on the GPU
        "import torch\nembeddings = []\nfor images, _ in loader:\n"
        "    embeddings.append(net(images.cuda()).detach())",
        "import torch\nouts = []\nwith torch.no_grad():\n    for x, y in val_loader:\n"
        "        outs.extend(model(x.cuda()))",
        # a running concatenation started on either arm
        "import torch\nall_out = None\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        out = model(x.cuda())\n"
        "        all_out = out if all_out is None else torch.cat((all_out, out))",
        # decorated, and handed the device
        "import torch\n@torch.no_grad()\ndef predict(model, loader, device):\n    preds = []\n"
        "    for x in loader:\n        preds.append(model(x.to(device)))\n"
        "    return torch.cat(preds)",
        # a tuple of GPU tensors per batch (YOLO-style stats)
        "import torch\nstats = []\nwith torch.no_grad():\n    for imgs, targets in loader:\n"
        "        pred = model(imgs.cuda())\n        stats.append((pred[:, 4], pred[:, 5]))",
        # a method whose one caller disables grad
        "import torch\nclass Runner:\n    def evaluate(self, loader):\n"
        "        with torch.no_grad():\n            return self.collect(loader)\n"
        "    def collect(self, loader):\n        feats = []\n        for x in loader:\n"
        "            feats.append(self.model(x.cuda()))\n        return feats",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.values = AutogradValues(ctx)
        self.stores = ctx.shared(StoresAt)
        self.index = ModuleIndex.of(ctx)
        self.candidates: list[_Candidate] = []

    def visit_Call(self, node: cst.Call) -> None:
        for store in self.stores(node):
            self._check_store(store)

    def visit_Assign(self, node: cst.Assign) -> None:
        for store in self.stores(node):
            self._check_store(store)

    def _check_store(self, store: Store) -> None:
        if store.verb not in _GROWING or not self.ctx.in_loop \
                or not self.ctx.names.imports("torch"):
            return
        owner = container_name(store.container)
        across = [loop for loop in (outlived_loops(self.ctx, owner) if owner else [])
                  if (iterates_data(loop) and reads_across_batches(loop))
                  or steps_through_data(loop, self.ctx)]
        if not across or _small_summary(store.stored, self.ctx) \
                or _tested_for_truth(store.stored, self.ctx.ancestors, across[-1]):
            return
        if not made_by_a_forward(store.stored, self.ctx):
            return  # the batch's own tensors (labels): the data set held them already
        if device_of_value(store.stored, self.ctx) is not True:
            return  # on the host, or nobody can tell: said less
        history = self.values.value_of(store.stored).history
        self.candidates.append(_Candidate(store, self.statement(), across[-1],
                                          self.ctx.grad_disabled, history, self.ctx.function))

    def finish(self) -> None:
        for candidate in self.candidates:
            info = self.index.info(candidate.function) if candidate.function else None
            grad_off = candidate.grad_off or (
                info is not None and self.index.grad_disabled_by_callers(info))
            if not grad_off and candidate.history is not False:
                continue  # autograd on and (maybe) history: MEM003's line, not this one
            store = candidate.store
            self.report(store.node, _message(store, candidate.over), candidate.statement,
                        UnlessProjectOnCpu.here(self.ctx), fix=_to_host(store))


def _small_summary(value: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool:
    """`out.argmax(1)`, `(pred == y).sum()`, `torch.argmax(out, 1)`, or a name
    bound to one (`labels = probs.argmax(1)`): one number per sample or per batch."""
    while isinstance(value, cst.Subscript):
        value = value.value
    if depth > 6:
        return False
    name = dotted_name(value)
    if name is not None:
        site = ctx.binding_site(name)
        return site is not None and site.unpacked_from is None and site.value is not value \
            and _small_summary(site.value, ctx, depth + 1)
    if isinstance(value, cst.BinaryOperation):  # `acc * 100`, `correct / n`
        return _small_summary(value.left, ctx, depth + 1) or \
            _small_summary(value.right, ctx, depth + 1)
    if isinstance(value, _COMPARISONS):
        return True
    if isinstance(value, cst.Call):
        func = value.func
        last = func.attr.value if isinstance(func, cst.Attribute) else \
            func.value if isinstance(func, cst.Name) else None
        if last in _SMALL_SUMMARIES or _computes_a_loss(func, ctx):
            return True
        if last in ("item", "long", "int", "float", "cpu", "detach") \
                and isinstance(func, cst.Attribute):
            return _small_summary(func.value, ctx, depth + 1) \
                if last in ("long", "int", "float", "detach") else False
    return False


def _tested_for_truth(value: cst.BaseExpression, ancestors: list[cst.CSTNode],
                      loop: cst.CSTNode) -> bool:
    """Kept under `if loss != 0:` or `if loss:`: a tensor whose truth Python
    takes holds one number (more than one raises), so one per batch is small."""
    if not isinstance(value, cst.Name):
        return False
    for node in reversed(ancestors):
        if node is loop:
            return False
        if isinstance(node, cst.If):
            test = node.test.expression if isinstance(node.test, cst.UnaryOperation) \
                else node.test
            if isinstance(test, cst.Comparison):
                sides = [test.left, *(c.comparator for c in test.comparisons)]
                if any(isinstance(s, cst.Name) and s.value == value.value for s in sides) \
                        and any(isinstance(s, (cst.Integer, cst.Float)) for s in sides):
                    return True
            elif isinstance(test, cst.Name) and test.value == value.value:
                return True
    return False


def _computes_a_loss(func: cst.BaseExpression, ctx: Context) -> bool:
    """`F.cross_entropy(...)`, `criterion(...)`: a loss, one number per batch
    (reduced by default)."""
    qualified = ctx.qualify(func) or ""
    if qualified.startswith("torch.nn.functional."):
        last = qualified.rsplit(".", 1)[-1]
        return "loss" in last or "entropy" in last or last == "kl_div"
    name = dotted_name(func)
    if name is None:
        return False
    bound = ctx.binding(name)
    return (built_kind(bound, ctx) if bound is not None else called_kind(name)) == "loss"


def _message(store: Store, loop: cst.CSTNode) -> str:
    text = code(store.stored)
    over = code(loop.iter) if isinstance(loop, cst.For) else "the loop"
    return (f"'{text}' stays on the GPU in '{code(store.container)}' for every batch of "
            f"'{over}': GPU memory grows with the data set, not the batch, until the list "
            f"is freed; {store.verb} a host copy ({text}.cpu()) or a per-batch reduction "
            f"instead, or keep it on purpose with `# noqa: MEM010` (a kNN feature bank)")


def _to_host(store: Store) -> FixPlan | None:
    """`preds.append(out)` -> `preds.append(out.cpu())`. Unsafe: code after the
    loop that uses the kept tensors with GPU tensors (a comparison with labels
    on the device, a `torch.cat` onto a CUDA tensor) then mixes devices. None
    for a concatenation, whose running tensor is on the GPU."""
    if store.verb == "concatenate":
        return None
    stored = store.stored
    if not isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) \
            and not stored.lpar:
        stored = stored.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    on_host = cst.Call(func=cst.Attribute(value=stored, attr=cst.Name("cpu")))
    return FixPlan(UNSAFE, f"{store.verb} {code(on_host)}", ((store.stored, on_host),))
