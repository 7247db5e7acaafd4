"""What a file written by `torch.save` holds, and what a path names: the
facts MEM007 asks of a load ("can this file hold GPU tensors?"). A save holds
CPU values when the code shows them moved or made on the host (`.cpu()`, a
model built here and never moved, the command-line arguments); an optimizer
holds its state where its parameters live."""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.walker import children
from memlint.analysis.context import Context
from memlint.analysis.devices import moves_to_cuda, string_value
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.torch_api import DOWNLOADS_RETURNING, DOWNLOADS_TO, LOADS

#: Names that hold an optimizer (`optimizer`, `self.opt`, `G_optim`).
OPTIMIZER_NAME = re.compile(r"(^|[._])(optim\w*|opt|opt_\w+|\w+_opt|\w*optimizer\w*)$",
                            re.IGNORECASE)


def strings_in(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The string literals of an expression (`os.path.join(d, "best.pt")`)."""
    found: list[cst.BaseExpression] = []
    pending = [node]
    while pending and len(found) < 8:
        current = pending.pop()
        if isinstance(current, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
            found.append(current)
        elif isinstance(current, cst.Call):
            pending.extend(arg.value for arg in current.args)
        elif isinstance(current, cst.BinaryOperation):
            pending.extend((current.left, current.right))
    return found


_BUILT_CLASS = re.compile(r"[A-Z](?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]*")


#: Keys under which a saved data set keeps its tensors.
DATA_KEYS = {"images", "labels", "data", "x", "y", "inputs", "targets", "features", "samples",
              "train", "test", "valid", "val", "train_x", "train_y", "test_x", "test_y"}


def literal_key(node: cst.Subscript) -> str | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    return string_value(node.slice[0].slice.value)


def path_key(node: cst.BaseExpression) -> str | None:
    """A path expression as text, to pair a load with the save of the same
    file: the literal, the name (`args.out`), or the file name written inside
    it (`os.path.join(args.model_dir, "training_args.bin")`)."""
    text = string_value(node)
    if text:
        return text
    return dotted_name(node) or file_named(node)


def file_named(node: cst.BaseExpression) -> str | None:
    """The file name a path expression spells out, if one: `best.pt` for
    `"runs/best.pt"` and `os.path.join(out, "best.pt")`; None for a bare
    name or a folder."""
    for literal in reversed(strings_in(node)):
        text = string_value(literal) or ""
        name = text.replace("\\", "/").rsplit("/", 1)[-1]
        if "." in name.strip("."):
            return name
    return None


#: What holds a program's settings (an argparse Namespace, a config), not tensors.
_ARGUMENTS = {"args", "training_args", "train_args", "config", "cfg", "hparams", "opt", "opts",
              "options", "hyperparams"}


#: libraries whose models and tensors are built on the CPU unless told otherwise
LIBRARIES = ("torch", "numpy", "scipy", "collections", "builtins", "math", "copy")


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    found, pending = [], [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Call):
            found.append(current)
        pending.extend(children(current))
    return found


def holds_optimizer_state(node: cst.BaseExpression) -> bool:
    """`optimizer.state_dict()`, `scheduler.state_dict()`: loaded back into an
    optimizer or a scheduler, never copied into a model."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    name = dotted_name(node)
    return name is not None and names_optimizer_state(name)


def names_optimizer_state(name: str) -> bool:
    """A name or key an optimizer's or a scheduler's state goes by
    (`optimizer`, `G_optim`, `lr_scheduler`, `"optimizers"`)."""
    return bool(OPTIMIZER_NAME.search(name)) or "scheduler" in name.lower()


def holds_other_than_weights(saved: cst.BaseExpression, ctx: Context) -> bool:
    """What a save shows to be no model's weights: a slice of an array
    (`params[0:2, :]`); a dict built with an optimizer's entry and no
    module's `state_dict()` (BasicSR's training state: epoch, iteration,
    `optimizers`, `schedulers`, which load back in place); a dict of NumPy
    results, settings and literals (FID statistics: `mean`, `cov`)."""
    name = dotted_name(saved)
    value = ctx.binding(name) if name is not None else saved
    if isinstance(value, cst.Subscript):
        return any(isinstance(element.slice, cst.Slice) for element in value.slice)
    if isinstance(value, cst.Call) and dotted_name(value.func) == "dict" \
            and all(arg.keyword is not None for arg in value.args):
        return all(_made_by_numpy_or_settings(arg.value, ctx) for arg in value.args)
    if not isinstance(value, cst.Dict):
        return False
    entries = [(string_value(e.key) or "", e.value) for e in value.elements
               if isinstance(e, cst.DictElement)]
    if len(entries) != len(value.elements) or not entries:
        return False
    optimizers = [key for key, _ in entries if OPTIMIZER_NAME.search(key)]
    # training state: the optimizers' entries and plain bookkeeping (`epoch`),
    # nothing a module could be made of (`deepcopy(model).half()`, `net.state_dict()`)
    bookkeeping = all(names_optimizer_state(key) or _plain(entry, ctx) for key, entry in entries)
    return (bool(optimizers) and bookkeeping) or all(
        _made_by_numpy_or_settings(entry, ctx) for _, entry in entries)


def _plain(value: cst.BaseExpression, ctx: Context) -> bool:
    """A literal, an empty container, or a name not bound to a call here."""
    if isinstance(value, (cst.SimpleString, cst.Integer, cst.Float, cst.Name)) \
            and not isinstance(ctx.binding(value.value) if isinstance(value, cst.Name)
                               else None, cst.Call):
        return True
    return isinstance(value, (cst.List, cst.Dict, cst.Tuple)) and not value.elements


def _made_by_numpy_or_settings(value: cst.BaseExpression, ctx: Context) -> bool:
    """A literal, a setting (`args.size`, `opt["name"]`), or a NumPy result."""
    if isinstance(value, (cst.SimpleString, cst.Integer, cst.Float, cst.FormattedString)):
        return True
    setting = dotted_name(value.value if isinstance(value, cst.Subscript) else value)
    if setting is not None and (setting.split(".")[0] in _ARGUMENTS
                                or setting.rsplit(".", 1)[-1] in _ARGUMENTS):
        return True  # `args.size`, `opt["name"]`, `self.opt`
    name = dotted_name(value)
    made = ctx.binding(name) if name is not None else value
    return isinstance(made, cst.Call) and (ctx.qualify(made.func) or "").startswith("numpy.")


def is_item(target: cst.BaseExpression, container: str, key: str) -> bool:
    """`sd[k]`."""
    return isinstance(target, cst.Subscript) and dotted_name(target.value) == container \
        and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
        and dotted_name(target.slice[0].slice.value) == key


def moves_to_cpu(value: cst.BaseExpression, name: str) -> bool:
    """`v.cpu()`, `v.detach().cpu()`, `v.cpu().clone()`, `v.to("cpu")` of `name`."""
    return moved_to_cpu(value) == name


def moved_to_cpu(value: cst.BaseExpression) -> str | None:
    """The name `value` moves to the CPU (`v` of `v.detach().cpu()`), if it does."""
    moved = moved_expression(value)
    return dotted_name(moved) if moved is not None else None


def moved_expression(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """What `value` moves to the CPU (`sd[k]` of `sd[k].cpu()`), if it does."""
    on_cpu = False
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        method = value.func.attr.value
        if method == "cpu" or (method == "to" and value.args
                               and string_value(value.args[0].value) == "cpu"):
            on_cpu = True
        elif method not in ("detach", "clone", "contiguous", "float", "half"):
            return None
        value = value.func.value
    return value if on_cpu else None


def holds_arguments(node: cst.BaseExpression) -> bool:
    """`torch.save(self.args, ...)`: the command-line arguments, no tensors."""
    name = dotted_name(node)
    return name is not None and name.rsplit(".", 1)[-1] in _ARGUMENTS


def saves_cpu_values(node: cst.BaseExpression, ctx: Context, moved_to_gpu: set[str],
                      expanding: tuple[cst.CSTNode, ...] = ()) -> bool:
    """`model.cpu().state_dict()`, `x.cpu()`, `{k: v.cpu() ...}`, or a name
    bound to such a value, to a CPU tensor factory without a device, or to a
    model built here (`NeuralNetwork()`) and not moved to a GPU before.
    `expanding`: the bound values being looked into, outermost first."""
    root = node
    while isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute) \
            and root.func.attr.value in ("state_dict", "detach", "clone"):
        root = root.func.value
    name = dotted_name(root)
    if name is not None and name.endswith(".module"):
        name = name[:-len(".module")]  # `model.module.state_dict()` of a DataParallel
    if name is not None and name not in moved_to_gpu:
        built = ctx.binding(name)
        while isinstance(built, cst.Call) and isinstance(built.func, cst.Attribute) \
                and built.func.attr.value in ("eval", "train", "float", "double"):
            built = built.func.value
        if isinstance(built, cst.Call) and built.args \
                and (dotted_name(built.func) or "").endswith("DataParallel"):
            built = built.args[0].value  # DataParallel moves nothing: what it wraps decides
            wrapped = dotted_name(built)
            if wrapped is not None:  # `net = DataParallel(net)`: the `net` before it
                site = ctx.binding_site(wrapped)
                if wrapped == name:
                    site = site.previous if site is not None else None
                built = None if wrapped in moved_to_gpu or site is None else site.value
            while isinstance(built, cst.Call) and isinstance(built.func, cst.Attribute) \
                    and built.func.attr.value in ("eval", "train", "float", "double", "to", "cuda"):
                if moves_to_cuda(built, ctx):
                    return False  # `Linear(10, 1).cuda()`
                built = built.func.value
        if isinstance(built, cst.Call) and call_arg(built, "device") is None \
                and _BUILT_CLASS.fullmatch((dotted_name(built.func) or "").rsplit(".", 1)[-1]) \
                and not _over_parameters(built):
            return True
    node = _resolve_outside(node, ctx, expanding)
    expanding = (*expanding, node)
    if isinstance(node, cst.DictComp):
        return saves_cpu_values(node.value, ctx, moved_to_gpu, expanding)
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        if method == "cpu":
            return True
        if method in ("state_dict", "detach", "clone", "float", "half", "contiguous"):
            node = node.func.value
            continue
        break
    if isinstance(node, cst.Call):
        helper = (dotted_name(node.func) or "").rsplit(".", 1)[-1].lower()
        cpu_flag = call_arg(node, "cpu")
        if "cpu" in helper.split("_") or (cpu_flag is not None
                                          and isinstance(cpu_flag.value, cst.Name)
                                          and cpu_flag.value.value == "True"):
            return True  # `as_cpu(state)`, `to_cpu(x)`, `state_dict(model, cpu=True)`
        qualified = ctx.qualify(node.func) or ""
        if qualified.startswith("torch.") and call_arg(node, "device") is None \
                and not qualified.startswith((*LOADS, "torch.cuda")):
            return True  # `torch.arange(4)`, `torch.randn(3)`: made on the CPU
    if isinstance(node, (cst.Dict, cst.List, cst.Tuple)):
        values = [e.value for e in node.elements if isinstance(e, (cst.DictElement, cst.Element))]
        return bool(values) and all(saves_cpu_values(v, ctx, moved_to_gpu, expanding)
                                    for v in values)
    return False


def _over_parameters(built: cst.Call) -> bool:
    """`AdamW(model.parameters())`: an optimizer, whose state is made where
    the parameters it was given live, not where it was built."""
    return any(isinstance(call.func, cst.Attribute)
               and call.func.attr.value in ("parameters", "named_parameters")
               for arg in built.args for call in calls_in(arg.value))


def _resolve_outside(node: cst.BaseExpression, ctx: Context, expanding: tuple[cst.CSTNode, ...],
                     ) -> cst.BaseExpression:
    """`ctx.resolve(node)`, except that a name met inside the value it is being
    rebound to (`state = {"model": state, "opt": ...}`) means the value it had
    before that binding, not the binding itself (which would never end)."""
    name = dotted_name(node)
    site = ctx.binding_site(name) if name is not None else None
    if site is None or site.value not in expanding:
        return ctx.resolve(node)
    while site is not None and site.value in expanding:
        site = site.previous
    return node if site is None else ctx.resolve(site.value)


def file_named_in(node: cst.BaseExpression, ctx: Context) -> str | None:
    """`file_named`, also through a name bound to the path (`filename =
    "checkpoint_ssd300.pth.tar"` then `torch.save(state, filename)`); a
    binding whose value holds the current node (`ckpt = torch.load(ckpt)`)
    is passed over for the one before it, and so is one that spells no file
    name (`snapshot = snapshot.replace("best_model", "epoch_9")`)."""
    found = file_named(node)
    name = dotted_name(node) if found is None else None
    site = ctx.binding_site(name) if name is not None else None
    while site is not None and any(a is site.value for a in ctx.ancestors):
        site = site.previous
    while site is not None and found is None:  # `p = p.replace("best", "last")`: the one before
        found, site = file_named(site.value), site.previous
    return found if found is not None else file_template(node, ctx)


def file_template(node: cst.BaseExpression, ctx: Context) -> str | None:
    """The file name a path built at run time spells, with `*` for what is
    not known (`f"checkpoints/finetune_{name}_0.pkl"` -> `finetune_*_0.pkl`,
    `"{}_{}.pkl".format(prefix, task)` with `prefix = f"ckpt/finetune_{n}"`
    -> `finetune_*_*.pkl`); None unless it keeps a word of its own (`*_*.pkl`
    could be any file)."""
    name = _template(node, ctx).replace("\\", "/").rsplit("/", 1)[-1]
    while "**" in name:
        name = name.replace("**", "*")
    stem = name.rsplit(".", 1)[0]
    return name if "*" in name and "." in name and _WORD.search(stem) else None


_WORD = re.compile(r"[A-Za-z0-9]{3,}")
_FIELD = re.compile(r"\{([^{}]*)\}")


def _template(node: cst.BaseExpression, ctx: Context,
              expanding: tuple[cst.CSTNode, ...] = ()) -> str:
    """What `node` spells, `*` where it is not known; `expanding`: the bound
    values being looked into (`p = p.replace("memo_", "")` reads the `p` before)."""
    if isinstance(node, cst.SimpleString):
        text = string_value(node)
        return "*" if text is None else text
    if isinstance(node, cst.FormattedString):
        return "".join(part.value if isinstance(part, cst.FormattedStringText) else "*"
                       for part in node.parts)
    if isinstance(node, cst.ConcatenatedString) or (
            isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
        return _template(node.left, ctx, expanding) + _template(node.right, ctx, expanding)
    if isinstance(node, cst.IfExp):  # also a name bound in both branches of an `if`
        body, orelse = _template(node.body, ctx, expanding), _template(node.orelse, ctx, expanding)
        return body if body == orelse else "*"
    if len(expanding) > 4:
        return "*"
    if isinstance(node, cst.Call):
        func = node.func
        values = [_template(arg.value, ctx, expanding) for arg in node.args if arg.keyword is None]
        if (dotted_name(func) or "").endswith("path.join"):
            return "/".join(values)
        if isinstance(func, cst.Attribute) and func.attr.value == "format":
            return _formatted(_template(func.value, ctx, expanding), values)
        if isinstance(func, cst.Attribute) and func.attr.value == "replace" and len(values) == 2 \
                and "*" not in "".join(values):
            return _template(func.value, ctx, expanding).replace(values[0], values[1])
    if isinstance(node, (cst.Name, cst.Attribute)):
        value = _resolve_outside(node, ctx, expanding)
        if value is not node:
            return _template(value, ctx, (*expanding, value))
    return "*"


def _formatted(text: str, values: list[str]) -> str:
    """`"{}_{}.pkl".format(a, b)` with what each argument spells put in."""
    positional = iter(values)

    def field(match: re.Match[str]) -> str:
        key = re.split("[:!]", match.group(1), maxsplit=1)[0]
        if not key:
            return next(positional, "*")
        return values[int(key)] if key.isdigit() and int(key) < len(values) else "*"

    return _FIELD.sub(field, text)


def holds_an_optimizer(saved: cst.BaseExpression, ctx: Context) -> bool:
    """`{"model": model, "optimizer": optimizer}`, `{"optim": opt.state_dict()}`:
    a save with an optimizer's state in it (on its parameters' GPU)."""
    value = ctx.resolve(saved)
    return isinstance(value, cst.Dict) and any(
        isinstance(e, cst.DictElement) and holds_optimizer_state(e.value)
        for e in value.elements)


def download_destination(node: cst.Call, qualified: str | None) -> str | None:
    """Where a download call puts the file it fetches (`urlretrieve(url,
    path)`, `torch.hub.download_url_to_file`, `gdown.download`): a file
    published by someone else, saved on a device the code does not show."""
    where = DOWNLOADS_TO.get(qualified or "")
    destination = call_arg(node, where[1], position=where[0]) if where else None
    return path_key(destination.value) if destination is not None else None


def returned_by_download(path: cst.BaseExpression, ctx: Context) -> bool:
    """`torch.load(hf_hub_download(repo, "model.pt"))`, also through a name
    bound to the download's result."""
    name = dotted_name(path)
    value = ctx.binding(name) if name is not None else path
    return isinstance(value, cst.Call) and ctx.qualify(value.func) in DOWNLOADS_RETURNING
