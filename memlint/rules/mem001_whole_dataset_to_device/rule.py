"""A whole data set put on the GPU at once instead of one batch at a time."""

from __future__ import annotations

from typing import Literal

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import (NONE, SPLITS, STRONG, UNKNOWN, WEAK, SampleLoops,
                                       iterates_loaded_collection, kept_as_is,
                                       name_evidence,
                                       name_words, reads_whole_file)
from memlint.analysis.devices import creates_on_cuda, cuda_tensor_type, moves_to_cuda
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.autograd_values import names_in
from memlint.analysis.walker import children
from memlint.analysis.torch_api import DATA_LOADERS, SAME_DATA_CALLS, TENSOR_DATASETS
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.mem001_whole_dataset_to_device.facts import (
    _SAME_DATA_METHODS, _Move, _Place, _chains_to, _is_literal, _leading_axis, _literal_rows,
    _moves_itself, _names_in, _names_used, _paired_target, _prefixes, _puts_on_cuda,
    _shorten, _sizes_only, _target_names, _unimported_torch, _value_given, _without_move)


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
_NOT_SETUP_WORDS = {"batch", "step", "sample", "forward", "predict", "act", "feed", "loss"}
#: Words of a function run once per batch or step (not `predict(X_test)`,
#: which may be handed a whole split and slice it itself).
_STEP_WORDS = {"batch", "step", "loss", "feed", "forward", "act"}
#: Functions that run once per batch or sample, where an index picks a batch.
_PER_BATCH_FUNCTIONS = {"getitem", "getitems", "batch", "batches", "minibatch", "iterate"}
#: Words in a callee's name that say it is a model being run.
_MODEL_WORDS = {"model", "net", "network", "encoder", "decoder", "classifier", "gnn", "gcn",
                "gat", "mlp", "module"}
class WholeDatasetToDevice(Rule):
    """A whole array, data frame or tensor data set moved to a CUDA device in one
    statement (`torch.tensor(X_train).to(device)`, `TensorDataset(x.cuda(), y.cuda())`):
    it occupies GPU memory for the program's lifetime, sized by the data set
    rather than the batch, and fails with out-of-memory as soon as the data
    grows. The data set is known by its origin or name, by being indexed batch
    by batch after the move (`X[i:i + bs]`, `self.x[index]` in `__getitem__`),
    or by a same-module helper returning it on the device (`batchify(corpus.train)`).

    Leaves alone per-batch moves inside a loop, models, literals and constants,
    random tensors, names that say "one sample" or "batch", devices that are
    not CUDA (XLA, MPS), and full-batch training: tensors fed whole to a model
    in a module that never batches them, where the data set is the batch."""

    code = "MEM001"

    MESSAGE = ("'{source}' is put on the GPU whole{how}: the entire data set stays in GPU memory "
               "for the program's lifetime, sized by the data rather than the batch; keep it "
               "on the CPU, wrap it in a Dataset and DataLoader(pin_memory=True), and move "
               "each batch with .to(device, non_blocking=True)")
    SAMPLES_MESSAGE = ("'{source}' puts the data set on the GPU{how}: the entire data set stays in "
                       "GPU memory, sized by the data rather than the batch; keep the samples on "
                       "the CPU and move each batch where it is used")
    TENSOR_DATASET_MESSAGE = (
        "TensorDataset built from tensors already on the GPU: the whole data set stays in "
        "GPU memory for the program's lifetime, sized by the data rather than the batch; "
        "build it from CPU tensors, load it with DataLoader(pin_memory=True) and move each "
        "batch with .to(device, non_blocking=True)")

    VALID = [
        # GCN/GAT on Cora: the loader returns the whole graph on the device, and
        # nothing in the module batches anything: the graph is the batch
        "import torch\ndef load_cora(path, device):\n    features, labels, adj = read(path)\n"
        "    return features.to(device), labels.to(device), adj.to(device)\n"
        "features, labels, adj = load_cora('./cora', 'cuda')\n"
        "for epoch in range(200):\n    train_iter(model, (features, adj), labels, idx_train)",
        # what processes the data (a normalizer module), not the data set
        "import torch\ndata_transform = IncrementalDataProcessor(in_normalizer=None)\n"
        "data_transform = data_transform.to(device)\n"
        "data_processor = darcy_dataset.data_processor.to(device)",
        # one image made a batch of one: not a data set
        "import torch\ninputs_control = Image.open('kitten.jpg')\n"
        "inputs_control = img_transform(inputs_control).unsqueeze(0)\nx = inputs_control.cuda()",
        # one batch, moved, then moved again: followed back to next(iter(...))
        "import torch\nimages, labels = next(iter(test_loader))\n"
        "images, labels = images.to(device), labels.to(device)\nshow(images)\n"
        "images, labels = images.to(device), labels.to(device)",
        # a model's own constant (an index table) built in its constructor
        "import torch\nimport numpy as np\nclass GBDT2NN(torch.nn.Module):\n"
        "    def __init__(self, used_features):\n        super().__init__()\n"
        "        self.used = torch.from_numpy(np.asarray(used_features)).to('cuda')",
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
        # full-batch training: the whole graph is the batch, fed whole every step
        'import torch\nfeatures, adj, labels = load_data()\nfeatures = features.cuda()\n'
        'adj = adj.cuda()\nfor epoch in range(200):\n    output = model(features, adj)',
        'import torch\ndata = dataset[0].to(device)\ndef train():\n'
        '    out = model(data.x, data.edge_index)',
        # XLA / TPU and MPS devices are not CUDA
        'import torch\nimport torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n'
        'X_train = torch.tensor(X_train).to(device)',
        'import torch\ndevice = "mps" if torch.backends.mps.is_available() else "cpu"\n'
        'X_train = torch.tensor(X_train).to(device)',
        # `from torch import *`: randn is torch's noise
        'from torch import *\nX_train = randn(1000, 10).cuda()',
        # a helper that returns the model's output, not the data it moved
        'import torch\ndef predict(net, inputs):\n    return net(inputs.to(device))\n'
        'preds = predict(model, X_test)',
        # a per-image mask, not a batch index
        'import torch\nfor j in range(n):\n    targets = (torch.ones(shape) * -1).cuda()\n'
        '    targets[positive_indices, :] = 0',
    ]
    INVALID = [
        # the twin: the module slices what the loader returned, batch by batch
        "import torch\ndef load_split(path, device):\n    X_train = read(path)\n"
        "    return X_train.to(device)\nX_train = load_split('train.npy', 'cuda')\n"
        "for i in range(0, len(X_train), 64):\n    model(X_train[i:i + 64])",
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
        # moved in a Dataset's __init__, indexed per sample: the data set, whatever its name
        'import torch\nfrom torch.utils.data import Dataset\nclass Rows(Dataset):\n'
        '    def __init__(self, x):\n        self.x = torch.tensor(x).to(device)\n'
        '    def __getitem__(self, i):\n        return self.x[i]',
        # a helper with a loose name that returns its argument on the device
        'import torch\ndef batchify(data, bsz):\n    data = data.view(bsz, -1).t().contiguous()\n'
        '    return data.to(device)\ntrain_data = batchify(corpus.train, 20)',
        # moved whole, then sliced into batches in the loop
        'import torch\ndef fit(X_np, bs):\n    X = torch.tensor(X_np).cuda()\n'
        '    for i in range(0, len(X), bs):\n        xb = X[i:i + bs]',
        'import numpy as np\nfrom torch import *\nX = tensor(np.load("x.npy")).cuda()',
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self._flagged_statements: set[int] = set()
        self._moves: list[_Move] = []
        #: helpers that move a parameter to the GPU whole: name -> (parameter, its position)
        self._helpers: dict[str, tuple[str, int]] = {}
        #: helpers that slice a parameter into batches: name -> positions
        self._slicing_helpers: dict[str, set[int]] = {}
        #: names indexed batch by batch: where (function, order) and the subscript as written
        self._sliced: dict[str, list[tuple[_Place, cst.Subscript | None]]] = {}
        #: (helper name, position, argument name, where) of calls that pass a name on
        self._passed: list[tuple[str, int, str, _Place]] = []
        self._order = 0  # moves, subscripts and calls seen so far: what comes after a move
        #: (function or module, names fed whole) of each model call
        self._fed_whole: list[tuple[cst.CSTNode, set[str]]] = []
        #: TensorDatasets built from CUDA tensors: (call, statement, names it is bound to)
        self._gpu_tensor_datasets: list[tuple[cst.Call, cst.CSTNode | None, frozenset[str]]] = []
        #: DataLoaders: (the dataset as written, names the loader is bound to)
        self._loaders: list[tuple[cst.BaseExpression, frozenset[str]]] = []
        #: loaders whose batches some loop moves to a CUDA device
        self._loaders_moved_per_batch: set[str] = set()
        #: the names the results of a call of each module function are bound to
        #: (`features, labels, adj = load_cora(device)`: load_cora -> the three)
        self._bound_from: dict[str, set[str]] = {}
        #: names handed whole to a call inside a loop (`train(model, (features, adj))`
        #: every epoch): the full-batch use of what a loader function returned
        self._handed_in_loops: set[str] = set()
        self.samples = ctx.shared(SampleLoops)
        #: moves of one sample in a loop over the data set: (loop, names bound, move, statement)
        self._sample_moves: list[tuple[cst.For, frozenset[str], cst.Call, cst.CSTNode | None]] = []

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in TENSOR_DATASETS:
            if any(_puts_on_cuda(arg.value, self.ctx) for arg in node.args):
                self._gpu_tensor_datasets.append((node, self.statement(),
                                                  self._dataset_names(node)))
            return
        if qualified in DATA_LOADERS:
            dataset = call_arg(node, "dataset", 0)
            if dataset is not None:
                self._loaders.append((dataset.value, self._targets(node)))
        self._note_call(node)
        self._note_whole_use(node)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "append" and node.args:
            self._note_kept(node.func.value, node.args[0].value)
        func = node.func
        if type(func) is cst.Attribute and moves_to_cuda(node, self.ctx):
            self._note_batch_move(func.value)
            source = func.value  # `<source>.to(device)`, `<source>.cuda()`
        elif creates_on_cuda(node, self.ctx) and node.args and (
                qualified in SAME_DATA_CALLS or cuda_tensor_type(node.func, self.ctx)):
            source = node.args[0].value  # `torch.tensor(<source>, device="cuda")`
        else:
            return
        if self._in_module_constructor():
            return  # a model's own tensors (an index table, a mask) live with it on the GPU
        if self._fed_to_a_model(node):
            return  # `model(X_test.to(device))`: the batch is the split, and the copy a temporary
        loop = self.samples.loop_of(source) if self.ctx.in_loop else None
        if loop is not None:
            self._sample_move(node, source, loop)
            return
        evidence = self._evidence(source)
        whole = evidence == STRONG or (evidence == WEAK and self._at_setup_level()
                                       and not self._from_a_parameter(source))
        targets = self._targets(node)
        if not whole and evidence != NONE:
            parameter, function = self._parameter_moved(source), self.ctx.function
            if parameter is not None and function is not None \
                    and self._returns_moved(node, targets):
                self._helpers[function.name.value] = parameter
        self._moves.append(_Move(node, self.statement(), source, whole,
                                 evidence != NONE and not self.ctx.in_loop
                                 and not self._in_step_function(), targets, self._place(),
                                 returned=any(type(a) is cst.Return for a in self.ctx.ancestors)))

    def _sample_move(self, node: cst.Call, source: cst.BaseExpression, loop: cst.For) -> None:
        """One sample moved in the loop over the data set: all of it ends on the GPU
        when the move is in place on an element of a collection read whole (`for
        data in dataset: data.to(d)`, PyG's in-place `Data.to`), or when the moved
        sample is kept in a container made before the loop (`frames[i] = x`)."""
        if isinstance(self.ctx.parent, cst.Expr) and isinstance(loop.iter, cst.Name) \
                and dotted_name(source) in names_in(loop.target) \
                and iterates_loaded_collection(loop, self.ctx):
            how = f" in place, element by element of '{loop.iter.value}'"
            self._report_once(node, self.SAMPLES_MESSAGE.format(source=_shorten(source), how=how))
        else:
            self._sample_moves.append((loop, self._targets(node), node, self.statement()))

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if len(node.targets) == 1 and isinstance(target, cst.Subscript):
            self._note_kept(target.value, node.value)

    def _note_kept(self, container: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`frames[i] = [x, y]`, `cache.append(x)`: report the sample moves whose
        results go into a container that outlives their loop over the data."""
        owner = dotted_name(container)
        if owner is None or not self._sample_moves:
            return
        site, kept = self.ctx.binding_site(owner), kept_as_is(value)
        for loop, targets, move, statement in self._sample_moves:
            outlives = site is None or not any(bound is loop for bound in site.loops)
            if targets & kept and outlives and any(o is loop for o in self.ctx.loops):
                source = move.func.value if isinstance(move.func, cst.Attribute) else move
                how = f" one sample at a time, each kept in '{owner}' after the loop"
                message = self.SAMPLES_MESSAGE.format(source=_shorten(source), how=how)
                self._report_once(move, message, statement)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        name = dotted_name(node.value)
        if name is None or not self._slices_batches(node):
            return
        self._sliced.setdefault(name, []).append((self._place(), node))
        position, function = self._parameter_position(name), self.ctx.function
        # `def get_batch(source, i): source[i:i + n]`
        if position is not None and function is not None:
            self._slicing_helpers.setdefault(function.name.value, set()).add(position)

    def _note_call(self, node: cst.Call) -> None:
        """Calls of same-module helpers (what they move or slice) and of models
        (what they are fed whole)."""
        func = node.func
        if isinstance(func, cst.Name):
            for position, arg in enumerate(node.args):
                name = dotted_name(arg.value)
                if arg.keyword is None and not arg.star and name is not None:
                    self._passed.append((func.value, position, name, self._place()))
            helper = self._helpers.get(func.value)
            if helper is not None:
                self._helper_call(node, func.value, *helper)
        fed = {prefix for arg in node.args for name in [dotted_name(arg.value)] if name
               for prefix in _prefixes(name)}
        if fed and self._is_model(func):
            self._fed_whole.append((self._step_unit(), fed))

    def _note_whole_use(self, node: cst.Call) -> None:
        """What a module function's results are bound to, and the names handed
        whole (or in a tuple) to calls inside loops."""
        if isinstance(node.func, cst.Name) and isinstance(self.ctx.parent, cst.Assign):
            self._bound_from.setdefault(node.func.value, set()).update(
                self._targets(node))
        if self.ctx.in_loop:
            for arg in node.args:
                values = [e.value for e in arg.value.elements] \
                    if isinstance(arg.value, cst.Tuple) else [arg.value]
                self._handed_in_loops.update(v.value for v in values if isinstance(v, cst.Name))

    def _helper_call(self, node: cst.Call, helper: str, parameter: str, position: int) -> None:
        """`train_data = batchify(corpus.train, bsz)` where batchify returns `data.to(device)`."""
        arg = call_arg(node, parameter, position)
        if arg is None:
            return
        evidence = self._evidence(arg.value)
        if evidence == STRONG or (evidence == WEAK and self._at_setup_level()):
            self._moves.append(_Move(node, self.statement(), arg.value, True,
                                     not self.ctx.in_loop, self._targets(node), self._place(),
                                     f" by {helper}()"))

    def _dataset_names(self, dataset: cst.Call) -> frozenset[str]:
        """What a TensorDataset is known by: the names it is bound to, or the
        loader's when it is built inside `DataLoader(TensorDataset(...))`."""
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Call):
                if self.ctx.qualify(ancestor.func) in DATA_LOADERS:
                    return frozenset({"<loader>", *self._targets(ancestor)})
                break
        return self._targets(dataset)

    def _note_batch_move(self, moved: cst.BaseExpression) -> None:
        """`x.to(device)` (`moved` is `x`) in `for x, y in loader:` (or of `x, y
        = batch` there): that loader's batches are moved to the GPU one by one."""
        receiver = moved
        while isinstance(receiver, (cst.Attribute, cst.Subscript)):
            receiver = receiver.value
        if not isinstance(receiver, cst.Name):
            return
        name = receiver.value
        site = self.ctx.binding_site(name)
        if self.ctx.loop_target(name) is None and site is not None \
                and isinstance(site.unpacked_from, cst.Name):
            name = site.unpacked_from.value  # `inputs, labels = batch`
        loop = self.ctx.loop_target(name)
        if not isinstance(loop, cst.For):
            return
        iterable = loop.iter
        while isinstance(iterable, cst.Call) and iterable.args:  # enumerate(), tqdm()
            iterable = iterable.args[0].value
        loader = dotted_name(iterable)
        if loader is not None:
            self._loaders_moved_per_batch.add(loader)

    def _host_dataset_fix(self, dataset: cst.Call, names: frozenset[str]) -> FixPlan | None:
        """`TensorDataset(x.cuda(), y.to(device))` -> `TensorDataset(x, y)`, where
        every loader over it is iterated by a loop that moves its batches to the
        GPU anyway. Unsafe: the data set's tensors change device, which code
        reading them other than through that loop would notice, and each batch
        is now copied (pin the loader: MEM005)."""
        loaders = set(names - {"<loader>"}) if "<loader>" in names else {
            target for source, targets in self._loaders if dotted_name(source) in names
            for target in targets}
        if not loaders or not loaders <= self._loaders_moved_per_batch:
            return None
        args = []
        for arg in dataset.args:
            value = _without_move(arg.value, self.ctx)
            if value is None:
                return None
            args.append(arg.with_changes(value=value))
        return FixPlan(UNSAFE, "build the TensorDataset from the tensors on the host (the loop "
                               "already moves each batch to the GPU)",
                       ((dataset, dataset.with_changes(args=args)),))

    def finish(self) -> None:
        """Report the moves of whole data sets, now that the module shows how each
        tensor is used: indexed batch by batch afterwards (whole, whatever its
        name), or fed whole to a model in a module that never batches (full-batch
        training: the data set is the batch, so its size is the batch's)."""
        for dataset, statement, names in self._gpu_tensor_datasets:
            self._report_once(dataset, self.TENSOR_DATASET_MESSAGE, statement,
                              self._host_dataset_fix(dataset, names))
        for helper, position, name, place in self._passed:
            if position in self._slicing_helpers.get(helper, ()):
                self._sliced.setdefault(name, []).append((place, None))
        batched = [(move, subscript) for move in self._moves if move.maybe_data
                   for subscript in [self._batched_after(move)] if subscript is not False]
        full_batch = set() if batched else self._full_batch_names()
        reported = {id(move) for move, _ in batched}
        for move, subscript in batched:
            how = move.helper + " and only then indexed batch by batch" + (
                f" ('{_shorten(subscript)}')" if subscript is not None else "")
            self._report_once(move.node, self.MESSAGE.format(source=_shorten(move.source), how=how),
                              move.statement)
        # a loader of the whole graph (`return features.to(device), labels.to(device),
        # adj.to(device)`) whose results are handed whole to a call every epoch, in a
        # module that never batches anything: full-batch training
        batches = bool(self._sliced) or bool(self._loaders)
        for move in self._moves:
            if move.returned and not batches and move.place.function is not None and \
                    self._bound_from.get(move.place.function.name.value, set()) \
                    & self._handed_in_loops:
                continue
            if move.whole and id(move) not in reported and not (
                    move.targets and move.targets <= full_batch):
                self._report_once(move.node, self.MESSAGE.format(source=_shorten(move.source),
                                                                 how=move.helper),
                                  move.statement)

    def _batched_after(self, move: _Move) -> cst.Subscript | Literal[False] | None:
        """The subscript that indexes `move`'s result batch by batch after it
        (None: through a helper such as `get_batch(data, i)`), or False."""
        for target in move.targets:
            for place, subscript in self._sliced.get(target, ()):
                if place.function is not move.place.function or place.order > move.place.order:
                    return subscript
        return False

    def _place(self) -> _Place:
        self._order += 1
        return _Place(self.ctx.function, self._order)

    def _full_batch_names(self) -> set[str]:
        """Names fed whole to a model, and the names the same step function uses
        with them (`model(features, adj)` and `labels[idx_train]` in `train()`)."""
        moved = {target for move in self._moves for target in move.targets}
        names: set[str] = set()
        steps: set[cst.CSTNode] = set()
        for unit, fed in self._fed_whole:
            if fed & moved:
                names |= fed
                if isinstance(unit, (cst.FunctionDef, cst.SimpleStatementLine)) \
                        and unit not in steps:
                    steps.add(unit)
                    names |= _names_used(unit)
        return names

    def _step_unit(self) -> cst.CSTNode:
        """Where the names used with a model call are looked for: its function
        (one training step), else its statement at the top level
        (`loss = loss_fn(model(X_train), y_train)` in a notebook's epoch loop)."""
        if self.ctx.function is not None:
            return self.ctx.function
        return self.statement() or self.ctx.scopes[0].node

    def _fed_to_a_model(self, move: cst.Call) -> bool:
        """`model(X_test.to(device))`: the moved copy is an argument of a forward
        (its methods applied first, `model(torch.tensor(X).float().cuda())`): fed
        whole, the data set is that forward's batch, and the copy is freed with
        the statement (full-batch use, as for a bound name fed whole)."""
        ancestors = self.ctx.ancestors
        i = len(ancestors) - 2  # the move is ancestors[-1]
        while i > 0 and isinstance(ancestors[i], cst.Attribute):
            outer = ancestors[i - 1]
            if not isinstance(outer, cst.Call) or outer.func is not ancestors[i]:
                break
            i -= 2  # `.float()` applied to the moved copy
        if i <= 0 or not isinstance(ancestors[i], cst.Arg):
            return False
        call = ancestors[i - 1]
        return isinstance(call, cst.Call) and self._is_model(call.func)

    def _from_a_parameter(self, source: cst.BaseExpression) -> bool:
        """Whether `source` is what the enclosing function (or method) was handed
        (`data_dict["x"]` in `preprocess(self, data_dict)`): one batch or the
        whole set, which only its callers show; a data-like name alone does not
        tell. A class's `__init__` is left out: a data set is handed to its
        constructor (`Frames(data)`) once."""
        function = self.ctx.function
        if function is None or function.name.value == "__init__":
            return False
        node = source
        for _ in range(12):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                    and not (self.ctx.qualify(node.func) or "").startswith("torch."):
                node = node.func.value  # a method of the data returns the data
            elif isinstance(node, cst.Call) and node.args \
                    and self.ctx.qualify(node.func) in SAME_DATA_CALLS:
                node = node.args[0].value
            elif isinstance(node, (cst.Subscript, cst.Attribute)):
                node = node.value
            else:
                break
        if not isinstance(node, cst.Name) or node.value in ("self", "cls") \
                or self.ctx.binding(node.value) is not None:
            return False  # `self.data`: the object's own, set where it was built
        return self._is_parameter(node.value)

    def _in_module_constructor(self) -> bool:
        """In `__init__` of a `torch.nn.Module` subclass (not a Dataset's)."""
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is None or function.name.value != "__init__" or class_def is None:
            return False
        return any((self.ctx.names.qualify(base.value) or "").startswith("torch.nn.")
                   for base in class_def.bases)

    def _report_once(self, node: cst.Call, message: str,
                     statement: cst.CSTNode | None = None, fix: FixPlan | None = None) -> None:
        statement = statement or self.statement()
        if id(statement) not in self._flagged_statements:
            self._flagged_statements.add(id(statement))
            self.report(node, message, statement, fix=fix)

    def _targets(self, call: cst.Call) -> frozenset[str]:
        """The names the current statement assigns `call`'s result to (`X`, `self.data`)."""
        statement = self.statement()
        if not isinstance(statement, cst.SimpleStatementLine):
            return frozenset()
        names: set[str] = set()
        for small in statement.body:
            if not isinstance(small, (cst.Assign, cst.AnnAssign)) or small.value is None:
                continue
            targets = small.targets if isinstance(small, cst.Assign) else [small]
            if _chains_to(small.value, call):
                for target in targets:
                    names.update(_target_names(target.target))
                continue
            for target in targets:  # `X_train, y_train = X_train.to(dev), y_train.to(dev)`
                paired = _paired_target(target.target, small.value, call)
                if paired is not None:
                    names.update(_target_names(paired))
        return frozenset(names)

    def _parameter_position(self, name: str) -> int | None:
        """The position of `name` among the parameters of the enclosing module-level
        function (not a method), if it is one."""
        function = self.ctx.function
        if function is None or self.ctx.class_def is not None:
            return None
        for position, param in enumerate(function.params.params):
            if param.name.value == name:
                return position
        return None

    def _returns_moved(self, move: cst.Call, targets: frozenset[str]) -> bool:
        """Whether the enclosing function returns what `move` moved:
        `return data.to(device)`, or `data = data.cuda()` ... `return data`
        (not `return net(x.to(device))`: that returns the model's output)."""
        function = self.ctx.function
        if function is None:
            return False
        stack: list[cst.CSTNode] = [function.body]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.Return):
                value = current.value
                if value is not None and (dotted_name(value) in targets or _chains_to(value, move)):
                    return True
            elif not isinstance(current, cst.BaseExpression):
                stack.extend(children(current))
        return False

    def _parameter_moved(self, source: cst.BaseExpression) -> tuple[str, int] | None:
        """The parameter whose data `source` is, through methods and local
        reassignments (`data = data.view(bsz, -1).t()`), if any."""
        node, seen = source, set()
        for _ in range(12):
            if isinstance(node, cst.Call):
                qualified = self.ctx.qualify(node.func) or ""
                if isinstance(node.func, cst.Attribute) and not qualified.startswith("torch."):
                    node = node.func.value  # any method of the data returns the data
                elif qualified in SAME_DATA_CALLS and node.args:
                    node = node.args[0].value
                else:
                    return None
            elif isinstance(node, cst.Subscript):
                if self._picks_a_batch(node):
                    return None
                node = node.value
            elif isinstance(node, cst.Name):
                bound = self.ctx.binding(node.value)
                site = self.ctx.binding_site(node.value)
                if site is not None and site.unpacked_from is not None:
                    return None  # `data, target = batch`
                if bound is not None and id(bound) not in seen:
                    seen.add(id(bound))
                    node = bound
                    continue
                position = self._parameter_position(node.value)
                return None if position is None else (node.value, position)
            else:
                return None
        return None

    def _in_step_function(self) -> bool:
        """`unpack_batch(batch)`, `calc_loss_dqn(...)`, `feed_data(data)`: a
        function run once per batch or step, whose tensors are that batch's
        (sliced per sample afterwards, they are still one batch)."""
        function = self.ctx.function
        return function is not None and bool(set(name_words(function.name.value)) & _STEP_WORDS)

    def _in_per_batch_function(self) -> bool:
        """`__getitem__`, `get_batch`, `iterate_minibatches`: run once per batch or sample."""
        function = self.ctx.function
        return function is not None \
            and bool(set(name_words(function.name.value)) & _PER_BATCH_FUNCTIONS)

    def _slices_batches(self, node: cst.Subscript) -> bool:
        """Rows picked per iteration: `X[i:i + bs]`, `X[ids[k]:ids[k + 1]]` in a loop,
        `X[idx]` with `idx = perm[i:i + bs]`, `self.x[index]` in `__getitem__` (not
        `X[:32]`, `X[:, i]`, a mask `X[positive]`, nor row `i` of a batch `X[i]`)."""
        first = node.slice[0].slice if node.slice else None
        per_batch = self._in_per_batch_function()
        if not (self.ctx.in_loop or per_batch):
            return False
        if isinstance(first, cst.Slice):
            return any(_names_in(bound) for bound in (first.lower, first.upper) if bound)
        if not isinstance(first, cst.Index) or not isinstance(first.value, cst.Name):
            return False
        index = first.value.value
        bound = self.ctx.binding(index)
        if isinstance(bound, cst.Subscript) and bound.slice \
                and isinstance(bound.slice[0].slice, cst.Slice):
            return True  # idx = perm[i:i + bs]
        return per_batch and self._is_parameter(index)

    def _is_parameter(self, name: str) -> bool:
        function = self.ctx.function
        return function is not None and any(p.name.value == name for p in function.params.params)

    def _is_model(self, func: cst.BaseExpression) -> bool:
        """`model(x)`, `self.net(x)`, or a name bound to a constructed class (`gat = GAT(...)`)."""
        name = dotted_name(func)
        if name is None or self.ctx.qualify(func) is not None:
            return False
        if set(name_words(name.rsplit(".", 1)[-1])) & _MODEL_WORDS:
            return True
        bound = self.ctx.binding(name)
        while isinstance(bound, cst.Call) and isinstance(bound.func, cst.Attribute) \
                and bound.func.attr.value in ("to", "cuda", "eval", "train", "double", "float"):
            bound = bound.func.value
        if not isinstance(bound, cst.Call):
            return False
        constructor = dotted_name(bound.func) or ""
        return constructor.rsplit(".", 1)[-1][:1].isupper() and not (
            self.ctx.qualify(bound.func) or "").startswith("torch.utils.data")

    def _at_setup_level(self) -> bool:
        """Module level, a class body, or a function that sets data up, outside loops."""
        if self.ctx.in_loop:
            return False
        function = self.ctx.function
        if function is None:
            return True
        words = set(name_words(function.name.value))
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
        if isinstance(node, cst.BinaryOperation):  # `torch.ones(n) * -1`, `(X - mean) / std`
            return max(self._evidence(node.left, depth + 1), self._evidence(node.right, depth + 1))
        name = dotted_name(node)
        if name is None:
            return NONE if _is_literal(node) else UNKNOWN
        if self.ctx.loop_target(name.split(".", 1)[0]) is not None:
            return NONE  # `for x, y in loader:` -- one batch
        bound = self.ctx.binding(name)
        site = self.ctx.binding_site(name)
        if site is not None:
            # `x = x.to(device)`, `x, y = x.to(d), y.to(d)`: what x was before it moved
            while site.previous is not None and _moves_itself(_value_given(site), name):
                site = site.previous
            bound = _value_given(site)  # `images, labels = next(iter(loader))`: the call
        if bound is not None and bound is not node:
            from_binding = self._evidence(bound, depth + 1)
            if from_binding != UNKNOWN:
                return from_binding
        if name.isupper() and len(name) > 1:
            return NONE  # a constant such as MEAN, defined elsewhere
        return name_evidence(name)

    def _call_evidence(self, node: cst.Call, depth: int) -> int:
        # `torch.zeros` where torch came in through another module's `import *`
        qualified = self.ctx.qualify(node.func) or _unimported_torch(node.func)
        if reads_whole_file(qualified):
            return STRONG
        if qualified in SAME_DATA_CALLS or cuda_tensor_type(node.func, self.ctx):
            if not node.args or _sizes_only(node, qualified):
                return NONE  # `torch.LongTensor(bptt, bsz)`: an empty buffer of that shape
            return self._evidence(node.args[0].value, depth + 1)
        if qualified.startswith(("torch.", "numpy.")):
            return NONE  # torch.randn, torch.zeros, nn.Linear(...), np.random.rand ...
        func = node.func
        if isinstance(func, cst.Attribute):
            if func.attr.value == "to_numpy":
                return self._frame_evidence(func.value, depth)
            if func.attr.value == "unsqueeze" and _leading_axis(node):
                return NONE  # `transform(image).unsqueeze(0)`: one sample made a batch of one
            if func.attr.value in _SAME_DATA_METHODS:
                return self._evidence(func.value, depth + 1)
            if func.attr.value in ("sample", "next", "__next__"):
                return NONE  # a replay-buffer / data-frame sample, an iterator's next batch
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
        if isinstance(first, cst.Index) and _literal_rows(first.value):
            return True  # `dataset[0]`, `dataset[torch.tensor([1])]`: a row or two
        for element in node.slice:
            for name in _names_in(element.slice):
                words = set(name_words(name))
                if words & _BATCH_INDEX_WORDS and not words & SPLITS:
                    return True
        return False
