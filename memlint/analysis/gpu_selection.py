"""Which GPU a process means to use, and which code ignores that choice.

A program run as one process per GPU (torchrun, a launcher's rank, a
device indexed by `args.gpu`) picks its device per process. PyTorch's *default* device is the
current one, cuda:0 until `torch.cuda.set_device` changes it: `.cuda()`,
`"cuda"`, `map_location="cuda"` and `torch.cuda.synchronize()` all mean
cuda:0 in every rank that has not called it. This module owns three facts:
where the program selects a GPU, where it makes the selection current, and
which calls put memory on the current device. Answers are about the code as
written; `MEM008` decides what they add up to.
"""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.context import Context, either_values
from memlint.analysis.devices import cuda_tensor_type, string_value
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.screens import CUDA_VISIBLE, SETS_ENVIRONMENT
from memlint.analysis.torch_api import (CONTEXT_ON_CURRENT_DEVICE, DEVICE_FACTORY, DEVICE_GUARDS,
                                        LOADS, RUNS_PER_GPU, SETS_CURRENT_DEVICE)

#: Environment variables a launcher sets per process.
_RANK_VARIABLES = {"LOCAL_RANK", "RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "MPI_LOCALRANKID"}
#: A name that holds a GPU index: `local_rank`, `args.gpu`, `rank`, `gpu_id`.
_INDEX_NAME = re.compile(r"(^|_)(local_?rank|rank|gpus?|gpu_?ids?|device_?ids?|gpu_?index)$")


def _environ_key(node: cst.BaseExpression, ctx: Context) -> str | None:
    """`"LOCAL_RANK"` of `os.environ["LOCAL_RANK"]`, `os.environ.get(...)`, `os.getenv(...)`."""
    if type(node) is cst.Subscript:
        if ctx.qualify(node.value) != "os.environ" or len(node.slice) != 1:
            return None
        index = node.slice[0].slice
        return string_value(index.value) if type(index) is cst.Index else None
    if type(node) is cst.Call and node.args:
        qualified = ctx.qualify(node.func)
        if qualified in ("os.getenv", "os.environ.get", "os.environ.setdefault"):
            return string_value(node.args[0].value)
    return None


BY_INDEX = "picks a CUDA device by index"

#: the option a per-GPU launcher (`torch.distributed.launch`) passes each process
_LAUNCHER_OPTIONS = {"--local_rank", "--local-rank"}


def reads_launcher_rank(node: cst.CSTNode, ctx: Context) -> bool:
    """A read of the rank a per-GPU launcher gives each process: its variable
    (`os.environ["LOCAL_RANK"]`, `os.getenv("RANK")`), never a write of it
    (a program that sets `RANK` starts the processes, or is a Ray actor), or
    its command-line option (`parser.add_argument("--local_rank")`)."""
    if type(node) is cst.Subscript:
        return type(ctx.parent) is not cst.AssignTarget \
            and _environ_key(node, ctx) in _RANK_VARIABLES
    if type(node) is not cst.Call:
        return False
    if _environ_key(node, ctx) in _RANK_VARIABLES:
        return True
    return type(node.func) is cst.Attribute and node.func.attr.value == "add_argument" \
        and any(string_value(arg.value) in _LAUNCHER_OPTIONS for arg in node.args[:2])


def tests_a_handed_device(ctx: Context) -> cst.If | None:
    """The `if` around here whose test checks a parameter of the enclosing
    function for a CUDA device (`if "cuda" in device:`, `device.type ==
    "cuda"`, `device.startswith("cuda")`): the function is handed the device
    (`--device cuda:1` reaches it), so work on the current one ignores it."""
    function = ctx.function
    if function is None:
        return None
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                     *function.params.kwonly_params)}
    ancestors = ctx.ancestors
    for i in range(len(ancestors) - 2, -1, -1):
        branch = ancestors[i]
        if branch is function:
            return None
        if type(branch) is cst.If and ancestors[i + 1] is branch.body \
                and _checks_for_cuda(branch.test) in params:
            return branch
    return None


def _checks_for_cuda(test: cst.BaseExpression) -> str | None:
    """The name a test checks for CUDA: `"cuda" in d`, `d.type == "cuda"`,
    `d.startswith("cuda")`."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        sides = (test.left, target.comparator)
        if type(target.operator) is cst.In and (string_value(sides[0]) or "") == "cuda":
            return dotted_name(sides[1])
        if type(target.operator) is cst.Equal and (string_value(sides[1]) or "") == "cuda" \
                and type(sides[0]) is cst.Attribute and sides[0].attr.value == "type":
            return dotted_name(sides[0].value)
    if type(test) is cst.Call and type(test.func) is cst.Attribute \
            and test.func.attr.value == "startswith" and test.args \
            and (string_value(test.args[0].value) or "") == "cuda":
        return dotted_name(test.func.value)
    return None


def selects_a_gpu(node: cst.CSTNode, ctx: Context) -> str | None:
    """What in `node` shows the program picks a GPU per process (None if
    nothing): a launcher's rank read from the environment or a process group
    (the whole program runs as ranks), or a CUDA device indexed by a
    variable (`BY_INDEX`: a choice made where it is written).
    `torch.cuda.set_device` alone is not one: a DataLoader worker's
    `worker_init_fn` may call it, and the main process picks nothing."""
    if type(node) is cst.Subscript:
        return "reads the rank its launcher set" if reads_launcher_rank(node, ctx) else None
    if type(node) is cst.FormattedString:
        text = string_value(node) or ""
        return BY_INDEX if text.lower().strip().startswith("cuda:") \
            and len(node.parts) > 1 else None
    if type(node) is not cst.Call:
        return None
    if _environ_key(node, ctx) in _RANK_VARIABLES:
        return "reads the rank its launcher set"
    qualified = ctx.qualify(node.func) or ""
    if qualified in RUNS_PER_GPU:
        return f"runs one process per GPU ({qualified.rsplit('.', 1)[-1]})"
    func = node.func
    if type(func) is cst.Attribute:
        method = func.attr.value
        if method == "format":  # `"cuda:{}".format(args.gpu)`
            template = (string_value(func.value) or "").lower()
            return BY_INDEX if template.startswith("cuda:") \
                and "{" in template else None
        if method == "cuda" and node.args and node.args[0].keyword is None:
            return BY_INDEX if _index_like(node.args[0].value) else None
    if qualified == DEVICE_FACTORY and len(node.args) >= 2 and _index_like(node.args[1].value):
        return BY_INDEX
    return None


def _index_like(node: cst.BaseExpression) -> bool:
    """A variable that holds a GPU index: `args.gpu`, `local_rank`, `rank % n`."""
    if type(node) is cst.BinaryOperation:
        return _index_like(node.left)
    name = dotted_name(node)
    return name is not None and bool(_INDEX_NAME.search(name.rsplit(".", 1)[-1].lower()))


def sets_current_device(node: cst.CSTNode, ctx: Context) -> bool:
    """`torch.cuda.set_device(i)`, `os.environ["CUDA_VISIBLE_DEVICES"] = ...`,
    or a library call that makes the rank's GPU current (`Accelerator()`)."""
    if type(node) is cst.Call:
        qualified = ctx.qualify(node.func)
        if qualified in SETS_CURRENT_DEVICE:
            return True
        return qualified in SETS_ENVIRONMENT and bool(node.args) \
            and string_value(node.args[0].value) == CUDA_VISIBLE
    if type(node) is cst.Assign:
        return any(type(t.target) is cst.Subscript and _environ_key(t.target, ctx) == CUDA_VISIBLE
                   for t in node.targets)
    return False


def hides_gpus(node: cst.Assign, ctx: Context) -> bool:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = ""` (or `"-1"`): the process sees
    no GPU, so every "cuda" device it names is never reached."""
    hidden = string_value(node.value)
    return hidden is not None and hidden.strip() in ("", "-1") and any(
        type(t.target) is cst.Subscript and _environ_key(t.target, ctx) == CUDA_VISIBLE
        for t in node.targets)


def shows_one_gpu(node: cst.Assign, ctx: Context) -> bool:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = "0"`: the process sees one GPU,
    so whatever ranks it starts share it, and a rank-to-GPU mapping (a
    checkpoint restored onto "its" GPU or another's) changes nothing."""
    shown = string_value(node.value)
    return shown is not None and shown.strip().isdigit() and any(
        type(t.target) is cst.Subscript and _environ_key(t.target, ctx) == CUDA_VISIBLE
        for t in node.targets)


def under_device_guard(ctx: Context) -> bool:
    """Inside `with torch.cuda.device(i):`: "cuda" there means GPU i."""
    for ancestor in ctx.ancestors:
        if type(ancestor) is cst.With and any(
                type(item.item) is cst.Call
                and ctx.qualify(item.item.func) in DEVICE_GUARDS
                for item in ancestor.items):
            return True
    return False


def default_device_use(call: cst.Call, ctx: Context) -> str | None:
    """How `call` puts memory (or a CUDA context) on the *current* device,
    as a short phrase, or None: `.cuda()` with no index, a move to or a
    tensor made on `"cuda"`, `torch.load(..., map_location="cuda")`,
    `torch.cuda.synchronize()`."""
    func = call.func
    if type(func) is cst.Attribute:
        method = func.attr.value
        if method == "cuda":
            if (ctx.qualify(func.value) or "").startswith("torch"):
                return None  # `torch.cuda` the module
            device = call_arg(call, "device", position=0)
            if device is None:
                return ".cuda() without an index"
            return "to 'cuda' without an index" if unindexed_cuda(device.value, ctx) else None
        if method == "to":
            device = call_arg(call, "device", position=0)
            return "to 'cuda' without an index" \
                if device is not None and unindexed_cuda(device.value, ctx) else None
        if method == "type" and call.args and cuda_tensor_type(call.args[0].value, ctx):
            return "a torch.cuda tensor type, made on the current device"
    qualified = ctx.qualify(func)
    if qualified is None or not qualified.startswith("torch"):
        return None
    if qualified in CONTEXT_ON_CURRENT_DEVICE:
        device = call_arg(call, CONTEXT_ON_CURRENT_DEVICE[qualified], position=0)
        return f"{qualified}() with no device, which creates a CUDA context on the current one" \
            if device is None or unindexed_cuda(device.value, ctx) else None
    if qualified in LOADS:
        target = call_arg(call, "map_location", position=1)
        return "map_location 'cuda' without an index" \
            if target is not None and unindexed_cuda(target.value, ctx) else None
    if cuda_tensor_type(func, ctx):
        return "a torch.cuda tensor type, made on the current device"
    device = call_arg(call, "device")
    if device is not None and unindexed_cuda(device.value, ctx):
        return "made on 'cuda' without an index"
    return None


def mapped_where_saved(node: cst.BaseExpression, ctx: Context) -> bool:
    """A `map_location` that restores tensors where they were saved, as none
    does: `None`, or `None` on one arm of a choice (`map_location=None if
    args.cuda else "cpu"`: on the GPU, where the finding's cost is)."""
    values = either_values(ctx.resolve(node))
    return any(type(value) is cst.Name and value.value == "None" for value in values)


def unindexed_cuda(node: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool:
    """`"cuda"`, `torch.device("cuda")`, `"cuda" if available else "cpu"`, or
    a name this file binds to one: a CUDA device that is whichever is current.
    False where it is indexed, not CUDA, or cannot be told."""
    if depth > 5:
        return False
    text = string_value(node)
    if text is not None:
        return type(node) is not cst.FormattedString and text.strip().lower() == "cuda"
    if type(node) is cst.IfExp:
        arms = (node.body, node.orelse)
        return any(unindexed_cuda(arm, ctx, depth + 1) for arm in arms) and not any(
            _indexed_or_unknown_cuda(arm, ctx) for arm in arms)
    if type(node) is cst.Call:
        if ctx.qualify(node.func) != DEVICE_FACTORY or not node.args:
            return False
        has_index = len(node.args) > 1 or call_arg(node, "index") is not None
        return not has_index and unindexed_cuda(node.args[0].value, ctx, depth + 1)
    name = dotted_name(node)
    if name is None:
        return False
    values = ctx.branch_values(name)  # each branch's device must be the current one
    return bool(values) and all(v is not node and unindexed_cuda(v, ctx, depth + 1)
                                for v in values)


def _indexed_or_unknown_cuda(node: cst.BaseExpression, ctx: Context) -> bool:
    """An arm of `a if c else b` that may be an indexed CUDA device (`f"cuda:{rank}"`)."""
    text = string_value(node)
    if text is not None:
        lowered = text.strip().lower()
        return lowered.startswith("cuda") and lowered != "cuda"
    return type(node) not in (cst.Call, cst.Name, cst.Attribute)


#: `if` tests whose truth means one process (or rank 0 only), and those whose
#: truth means several: in the first, the default device is the rank's own.
_DISTRIBUTED_FLAGS = re.compile(r"(^|_)(distributed|ddp|is_distributed|use_ddp|"
                                r"multiprocessing_distributed|is_dist|dist_training)$")
_MAIN_PROCESS_CALLS = re.compile(r"(^|_)(is_main_process|is_master|is_rank_zero|main_process|"
                                 r"is_primary|is_local_master)$")


def single_process_test(test: cst.BaseExpression, ctx: Context) -> bool | None:
    """True if `test` holds only in a single-process run or on rank 0
    (`local_rank == -1`, `not args.distributed`, `rank == 0`,
    `is_main_process()`), False if it holds only when the program runs as
    several ranks (`args.distributed`, `local_rank != -1`), None otherwise."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = single_process_test(test.expression, ctx)
        return None if inner is None else not inner
    if type(test) is cst.BooleanOperation:
        sides = (single_process_test(test.left, ctx), single_process_test(test.right, ctx))
        if type(test.operator) is cst.And:
            return True if True in sides else False if False in sides else None
        return None
    if type(test) is cst.Call:
        function_name = dotted_name(test.func) or ""
        if _MAIN_PROCESS_CALLS.search(function_name.rsplit(".", 1)[-1]):
            return True
        if function_name.rsplit(".", 1)[-1] == "is_initialized":
            return False
        return None
    name = dotted_name(test)
    if name is not None:
        last = name.rsplit(".", 1)[-1].lower()
        if _DISTRIBUTED_FLAGS.search(last):
            return False
        if _MAIN_PROCESS_CALLS.search(last):
            return True
        return None
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    left = test.left
    target = test.comparisons[0]
    if type(target.operator) is cst.Is and type(target.comparator) is cst.Name \
            and target.comparator.value == "None" and _INDEX_NAME.search(
                (dotted_name(left) or "").rsplit(".", 1)[-1].lower()):
        return True  # `args.gpu is None`: no GPU of its own, one process for the node
    left_name = dotted_name(left.func if type(left) is cst.Call else left) or ""
    read = left.args[0].value if type(left) is cst.Call and dotted_name(left.func) == "int" \
        and left.args else left  # `int(os.environ["LOCAL_RANK"])`
    last = "rank" if _environ_key(read, ctx) in _RANK_VARIABLES \
        else left_name.rsplit(".", 1)[-1].lower()
    operator, right = type(target.operator), _number_set(target.comparator)
    if right is None:
        return None
    if "rank" in last or last.endswith("process_index"):  # accelerate's, HF's rank
        if operator in (cst.Equal, cst.In, cst.LessThanEqual, cst.LessThan):
            return right <= {-1, 0} if operator in (cst.Equal, cst.In) else max(right) <= 0
        if operator is cst.NotEqual and right == {-1}:
            return False
        return None
    if "world_size" in last or last in ("num_gpus", "ngpus", "world"):
        if operator is cst.Equal and right == {1} \
                or operator is cst.LessThanEqual and right == {1} \
                or operator is cst.LessThan and right == {2}:
            return True
        if operator is cst.GreaterThan and right == {1}:
            return False
    return None


def in_single_process_arm(ctx: Context) -> bool:
    """In the branch that runs as one process, or on rank 0 alone: `if
    local_rank == -1:`, the `else` of `if args.distributed:`, `if rank == 0:`,
    `if args.gpu is None:`."""
    ancestors = ctx.ancestors
    for i in range(len(ancestors) - 1):
        branch = ancestors[i]
        if type(branch) is cst.If:
            single = single_process_test(branch.test, ctx)
            if single is not None and single == (ancestors[i + 1] is branch.body):
                return True
    return False


def _number_set(node: cst.BaseExpression) -> set[int] | None:
    """`0` -> {0}, `-1` -> {-1}, `(-1, 0)` / `[-1, 0]` -> {-1, 0}; `"0"` -> {0}
    (an environment variable compared as text)."""
    if type(node) is cst.SimpleString:
        text = node.value.strip("\"'")
        return {int(text)} if text.lstrip("-").isdigit() else None
    if type(node) is cst.Tuple or type(node) is cst.List or type(node) is cst.Set:
        numbers: set[int] = set()
        for element in node.elements:
            part = _number_set(element.value)
            if part is None:
                return None
            numbers |= part
        return numbers
    if type(node) is cst.Integer:
        return {int(node.value)}
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus \
            and type(node.expression) is cst.Integer:
        return {-int(node.expression.value)}
    return None
