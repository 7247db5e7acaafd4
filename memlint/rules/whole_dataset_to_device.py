"""A whole data set put on the GPU at once instead of one batch at a time."""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.devices import creates_on_cuda, cuda_tensor_type, moves_to_cuda
from memlint.analysis.names import dotted_name
from memlint.rules.base import Rule

_TENSOR_TYPES = ("Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor",
                 "LongTensor", "IntTensor", "ShortTensor", "ByteTensor", "CharTensor",
                 "BoolTensor")
#: Calls whose result holds the same data as their first argument.
_SAME_DATA_CALLS = {"torch.tensor", "torch.as_tensor", "torch.asarray", "torch.from_numpy",
                    "numpy.array", "numpy.asarray", "numpy.ascontiguousarray",
                    *(f"torch.{t}" for t in _TENSOR_TYPES)}
_SAME_DATA_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "bool", "byte",
                      "astype", "reshape", "view", "contiguous", "squeeze", "unsqueeze",
                      "transpose", "permute", "flatten", "clone", "copy", "type", "to",
                      "pin_memory", "numpy", "detach", "requires_grad_"}
#: Readers of whole files into memory.
_READERS = {"numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile",
            "numpy.memmap"}
_READER_PREFIXES = ("pandas.read_",)
_TENSOR_DATASETS = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}

# Words in a variable name that say "this is the data set", split like `X_train` -> x, train.
_SPLITS = {"train", "training", "test", "testing", "val", "valid", "validation", "holdout",
           "all", "full", "whole", "entire"}
_SPLIT_NAMES = ("train", "test")  # not `val`, `valid`: a value, a flag
_DATA_WORDS = {"x", "y", "data", "features", "feats", "labels", "images", "imgs", "targets",
               "inputs", "samples", "examples", "set", "ds", "arr", "array", "tensor",
               "tensors", "matrix", "points", "sequences", "texts", "tokens"}
_DATASET_WORDS = {"dataset", "datasets", "df", "dataframe", "corpus", "trainset", "testset",
                  "valset", "xtrain", "ytrain", "xtest", "ytest", "xval", "yval", "trainx",
                  "trainy", "testx", "testy"}
#: Names that hold the data set only where data is set up (module, __init__, load_data ...).
_WEAK_DATA_WORDS = {"data", "features", "feats", "labels", "images", "imgs", "targets",
                    "inputs", "samples", "examples"}
#: Index names that pick a mini-batch or one sample out of the data.
_BATCH_INDEX_WORDS = {"i", "j", "k", "b", "idx", "idxs", "index", "indices", "ix", "batch",
                      "ids", "sample", "mb", "minibatch", "start", "end", "perm"}
#: Data-frame methods whose result is a summary, not the data.
_REDUCTIONS = {"max", "min", "mean", "sum", "std", "var", "median", "count", "nunique",
               "describe", "head", "tail", "sample", "value_counts", "unique", "corr",
               "cov", "quantile", "mode", "first", "last", "idxmax", "idxmin"}
#: Function names where the whole data set is loaded and prepared.
_SETUP_WORDS = {"init", "setup", "prepare", "load", "read", "build", "make", "create",
                "preprocess", "main", "data", "dataset", "datasets"}
_NOT_SETUP_WORDS = {"batch", "step", "sample", "forward", "predict", "act"}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

NONE, UNKNOWN, WEAK, STRONG = range(4)


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def _name_evidence(name: str) -> int:
    """How surely a variable name holds a whole data set, from its words alone."""
    parts = [p for p in name.split(".") if p not in ("self", "cls")]
    words = {w for part in parts for w in _words(part)}
    words |= {part.lower().replace("_", "") for part in parts}
    if words & _DATASET_WORDS or (words & _SPLITS and words & _DATA_WORDS):
        return STRONG
    if words & _WEAK_DATA_WORDS or (parts and parts[-1] in ("X", "Y", *_SPLIT_NAMES)):
        return WEAK
    return UNKNOWN


class WholeDatasetToDevice(Rule):
    """A whole array, data frame or tensor data set moved to a CUDA device in one
    statement (`torch.tensor(X_train).to(device)`, `TensorDataset(x.cuda(), y.cuda())`):
    it occupies GPU memory for the program's lifetime, sized by the data set
    rather than the batch, and fails with out-of-memory as soon as the data
    grows. Leaves alone per-batch moves inside a loop, models, literals and
    constants, random tensors, and names that say "one sample" or "batch"."""

    code = "MEM001"
    name = "whole-dataset-to-device"
    keywords = ("cuda", "dev", ".to(")

    MESSAGE = ("'{source}' is put on the GPU whole: the entire data set stays in GPU memory "
               "for the program's lifetime, sized by the data rather than the batch; keep it "
               "on the CPU, wrap it in a Dataset and DataLoader(pin_memory=True), and move "
               "each batch with .to(device, non_blocking=True)")
    TENSOR_DATASET_MESSAGE = (
        "TensorDataset built from tensors already on the GPU: the whole data set stays in "
        "GPU memory for the program's lifetime, sized by the data rather than the batch; "
        "build it from CPU tensors, load it with DataLoader(pin_memory=True) and move each "
        "batch with .to(device, non_blocking=True)")

    VALID = [
        'import torch\nfor x, y in loader:\n    x, y = x.to(device), y.to(device)',
        'import torch\nmodel = Net().to(device)\ncriterion = torch.nn.MSELoss().cuda()',
        'import torch\nweights = torch.tensor([0.5, 0.5]).to(device)',
        'import torch\nMEAN = (0.485, 0.456, 0.406)\n'
        'mean = torch.tensor(MEAN).view(3, 1, 1).cuda()',
        'import torch\nnoise = torch.randn(64, 100, device=device)',
        'import torch\ndef act(self, state):\n'
        '    state = torch.FloatTensor(state).to(self.device)\n    return self.policy(state)',
        'import torch\ndef update(self):\n    batch = self.memory.sample(64)\n'
        '    states = torch.tensor(batch.states).to(device)',
        'import torch\nlabels = labels.to(torch.int64)',
        'import torch\ndef loss(model, subject, device):\n'
        '    values = torch.from_numpy(subject.values).to(device)\n    return model(values)',
        'import torch\nspread = torch.Tensor(stats.abs().max().values).to(device)',
        'import torch\nx_val_batch = torch.from_numpy(x_val[:32]).float().to(device)',
        'import torch\ndef train_step(model, images, labels):\n'
        '    images, labels = images.to(device), labels.to(device)\n    return model(images)',
        'import numpy as np\nimport torch\nX_train = np.load("x.npy")\n'
        'train_ds = torch.utils.data.TensorDataset(torch.from_numpy(X_train))',
        'import torch\nX_train = torch.tensor(X_train).to("cpu")',
        'import torch\nfor i in range(0, n, 64):\n'
        '    xb = torch.tensor(X_train[i:i + 64]).to(device)',
        'import torch\ndata = next(iter(loader))[0]\ndata = torch.tensor(data).cuda()',
        'import torch\nimages, labels = next(iter(train_loader))\nimages = images.to(device)',
        'import torch\ntemperature = torch.tensor(0.1, device="cuda")',
        'import torch\ndef get_batch(split):\n'
        '    data = train_data if split == "train" else val_data\n'
        '    x = torch.stack([data[i:i + 8] for i in ix])\n    return x.to(device)',
    ]
    INVALID = [
        'import torch\nX_train = torch.tensor(X_train).to(device)',
        'import torch\nx = torch.FloatTensor(df.values).cuda()',
        'import torch\nfeatures = torch.tensor(arr_train, device="cuda")',
        'import torch\nfrom torch.utils.data import TensorDataset\n'
        'ds = TensorDataset(x.to(dev), y.to(dev))',
        'import numpy as np\nimport torch\nimages = torch.from_numpy(np.load("images.npy")).cuda()',
        'import torch\nclass Frames(torch.utils.data.Dataset):\n'
        '    def __init__(self, data, device):\n'
        '        self.data = torch.tensor(data).to(device)',
        'import pandas as pd\nimport torch\nframe = pd.read_csv("train.csv")\n'
        'X = torch.tensor(frame.drop(columns="y").to_numpy(), dtype=torch.float32).to("cuda")',
        'import torch as t\ndef train(model, X_train, y_train):\n'
        '    X = t.tensor(X_train).float().to(t.device("cuda"))',
        'import torch\ntrain_x = train_x.type(torch.cuda.FloatTensor)',
        'import torch\nX = torch.from_numpy(X).float()\nX = X.to(device)',
        'import numpy as np\nimport torch\nDATA = np.load("all.npy")\n'
        'DATA_GPU = torch.as_tensor(DATA).cuda()',
        'import torch\nTensor = torch.cuda.FloatTensor\ninputs = Tensor(X_train)',
        'import torch\nclass Graph:\n    def __init__(self, users, device):\n'
        '        self.user_feats = torch.LongTensor(users.values).to(device)',
        'import torch\ndef main():\n    train, test = split(ratings)\n'
        '    test_tensor = torch.FloatTensor(test).to(device)',
        'import torch\nmnist = load()\nimages = mnist.train_dataset.data.float().cuda()',
        'import torch\nfor epoch in range(10):\n'
        '    inputs = torch.from_numpy(x_train).to(device)',
    ]

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self._flagged_statements: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in _TENSOR_DATASETS:
            if any(_puts_on_cuda(arg.value, self) for arg in node.args):
                self._report_once(node, self.TENSOR_DATASET_MESSAGE)
            return
        if moves_to_cuda(node, self.ctx):
            source = node.func.value  # `<source>.to(device)`, `<source>.cuda()`
        elif creates_on_cuda(node, self.ctx) and node.args and (
                qualified in _SAME_DATA_CALLS or cuda_tensor_type(node.func, self.ctx)):
            source = node.args[0].value  # `torch.tensor(<source>, device="cuda")`
        else:
            return
        evidence = self._evidence(source)
        if evidence == STRONG or (evidence == WEAK and self._at_setup_level()):
            self._report_once(node, self.MESSAGE.format(source=_shorten(source)))

    def _report_once(self, node: cst.Call, message: str) -> None:
        statement = self.statement()
        if id(statement) not in self._flagged_statements:
            self._flagged_statements.add(id(statement))
            self.report(node, message)

    def _at_setup_level(self) -> bool:
        """Module level, a class body, or a function that sets data up, outside loops."""
        if self.ctx.in_loop:
            return False
        function = self.ctx.function
        if function is None:
            return True
        words = set(_words(function.name.value))
        return bool(words & _SETUP_WORDS) and not words & _NOT_SETUP_WORDS

    def _evidence(self, node: cst.BaseExpression, depth: int = 0) -> int:
        """NONE (known not to be a data set), UNKNOWN, WEAK (a data-like name) or
        STRONG (read from disk, a data frame, a name like `X_train`)."""
        if depth > 8:
            return UNKNOWN
        if isinstance(node, cst.Call):
            return self._call_evidence(node, depth)
        if isinstance(node, cst.Attribute):
            if node.attr.value == "values":
                return self._frame_evidence(node.value, depth)  # `df.values`
            if node.attr.value in ("T", "mT", "data"):
                inner = self._evidence(node.value, depth + 1)
                if inner != UNKNOWN:
                    return inner
        if isinstance(node, cst.Subscript):
            if self._picks_a_batch(node):
                return NONE
            return self._evidence(node.value, depth + 1)
        name = dotted_name(node)
        if name is None:
            return NONE if _is_literal(node) else UNKNOWN
        if self.ctx.loop_target(name.split(".", 1)[0]) is not None:
            return NONE  # `for x, y in loader:` -- one batch
        bound = self.ctx.binding(name)
        site = self.ctx.binding_site(name)
        if site is not None and site.unpacked_from is not None:
            bound = site.unpacked_from  # `images, labels = next(iter(loader))`
        if bound is not None and bound is not node:
            from_binding = self._evidence(bound, depth + 1)
            if from_binding != UNKNOWN:
                return from_binding
        if name.isupper() and len(name) > 1:
            return NONE  # a constant such as MEAN, defined elsewhere
        return _name_evidence(name)

    def _call_evidence(self, node: cst.Call, depth: int) -> int:
        qualified = self.ctx.qualify(node.func) or ""
        if qualified in _READERS or qualified.startswith(_READER_PREFIXES):
            return STRONG
        if qualified in _SAME_DATA_CALLS or cuda_tensor_type(node.func, self.ctx):
            return self._evidence(node.args[0].value, depth + 1) if node.args else NONE
        if qualified.startswith(("torch.", "numpy.")):
            return NONE  # torch.randn, torch.zeros, nn.Linear(...), np.random.rand ...
        func = node.func
        if isinstance(func, cst.Attribute):
            if func.attr.value == "to_numpy":
                return self._frame_evidence(func.value, depth)
            if func.attr.value in _SAME_DATA_METHODS:
                return self._evidence(func.value, depth + 1)
            if func.attr.value == "sample":
                return NONE  # a replay-buffer / data-frame sample
        if isinstance(func, cst.Name) and func.value in ("next", "iter"):
            return NONE  # one batch of a loader
        return UNKNOWN

    def _frame_evidence(self, frame: cst.BaseExpression, depth: int) -> int:
        """`df.values`, `df[cols].to_numpy()`: a data frame's contents, unless the
        frame is a reduction (`stats.max().values`) or one row of a loop."""
        if isinstance(frame, cst.Call) and isinstance(frame.func, cst.Attribute) \
                and frame.func.attr.value in _REDUCTIONS:
            return NONE
        inner = self._evidence(frame, depth + 1)
        return NONE if inner == NONE else max(inner, WEAK)

    def _picks_a_batch(self, node: cst.Subscript) -> bool:
        """`X[i:i + bs]`, `data[idx]`, `x_val[:32]`: some rows picked by an index
        or a literal bound, not the split."""
        first = node.slice[0].slice if node.slice else None
        if isinstance(first, cst.Slice) and any(
                isinstance(bound, cst.Integer) for bound in (first.lower, first.upper)):
            return True
        for element in node.slice:
            for name in _names_in(element.slice):
                words = set(_words(name))
                if words & _BATCH_INDEX_WORDS and not words & _SPLITS:
                    return True
        return False


def _puts_on_cuda(node: cst.BaseExpression, rule: WholeDatasetToDevice) -> bool:
    """Whether the expression contains a move to (or a creation on) a CUDA device."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and (moves_to_cuda(current, rule.ctx)
                                              or creates_on_cuda(current, rule.ctx)):
            return True
        stack.extend(current.children)
    return False


def _names_in(node: cst.CSTNode) -> list[str]:
    found: list[str] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.append(current.value)
        elif not isinstance(current, cst.Attribute):
            stack.extend(current.children)
    return found


def _is_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.Integer, cst.Float,
                             cst.SimpleString, cst.ListComp, cst.UnaryOperation))


def _shorten(node: cst.BaseExpression, limit: int = 40) -> str:
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
