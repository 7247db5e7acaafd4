"""A whole data set put on the GPU at once instead of one batch at a time."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import (NONE, STRONG, WEAK, SampleLoops, data_evidence,
                                       iterates_loaded_collection, kept_as_is)
from memlint.analysis.devices import creates_on_cuda, cuda_tensor_type, moves_to_cuda
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.autograd_values import names_in
from memlint.analysis.torch_api import DATA_LOADERS, SAME_DATA_CALLS, TENSOR_DATASETS
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.mem001_whole_dataset_to_device.facts import (
    _Move, _Place, _prefixes, _puts_on_cuda, _shorten)
from memlint.rules.mem001_whole_dataset_to_device.places import (
    assigned_names, at_setup_level, batch_loader, fed_to_a_model, from_a_parameter,
    in_module_constructor, in_step_function, is_model, names_moved_before, parameter_moved,
    parameter_position, returns_moved, slices_batches)
from memlint.rules.mem001_whole_dataset_to_device.uses import (
    batched_after, full_batch_names, host_dataset_fix)


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
        #: TensorDatasets of GPU tensors: (call, statement, names it is bound to,
        #: the move of the first argument bound to a GPU tensor in this function)
        self._gpu_tensor_datasets: list[tuple[cst.Call, cst.CSTNode | None, frozenset[str],
                                              _Move | None]] = []
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
            # of tensors put on the GPU there, or of names bound to such (`X = X.cuda()`)
            moved = names_moved_before(self.ctx, node)
            first = next((m for m in self._moves if m.targets & moved
                          and m.place.function is self.ctx.function), None) if moved else None
            if moved or any(_puts_on_cuda(arg.value, self.ctx) for arg in node.args):
                self._gpu_tensor_datasets.append((node, self.statement(),
                                                  self._dataset_names(node), first))
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
            loader = batch_loader(self.ctx, func.value)
            if loader is not None:
                self._loaders_moved_per_batch.add(loader)
            source = func.value  # `<source>.to(device)`, `<source>.cuda()`
        elif creates_on_cuda(node, self.ctx) and node.args and (
                qualified in SAME_DATA_CALLS or cuda_tensor_type(node.func, self.ctx)):
            source = node.args[0].value  # `torch.tensor(<source>, device="cuda")`
        else:
            return
        if in_module_constructor(self.ctx):
            return  # a model's own tensors (an index table, a mask) live with it on the GPU
        if fed_to_a_model(self.ctx, node):
            return  # `model(X_test.to(device))`: the batch is the split, and the copy a temporary
        loop = self.samples.loop_of(source) if self.ctx.in_loop else None
        if loop is not None:
            self._sample_move(node, source, loop)
            return
        evidence = data_evidence(self.ctx, source)
        whole = evidence == STRONG or (evidence == WEAK and at_setup_level(self.ctx)
                                       and not from_a_parameter(self.ctx, source))
        targets = self._targets(node)
        if not whole and evidence != NONE:
            parameter, function = parameter_moved(self.ctx, source), self.ctx.function
            if parameter is not None and function is not None \
                    and returns_moved(self.ctx, node, targets):
                self._helpers[function.name.value] = parameter
        self._moves.append(_Move(node, self.statement(), source, whole,
                                 evidence != NONE and not self.ctx.in_loop
                                 and not in_step_function(self.ctx), targets, self._place(),
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
        if name is None or not slices_batches(self.ctx, node):
            return
        self._sliced.setdefault(name, []).append((self._place(), node))
        position, function = parameter_position(self.ctx, name), self.ctx.function
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
        if fed and is_model(self.ctx, func):
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

    def _targets(self, call: cst.Call) -> frozenset[str]:
        return assigned_names(self.ctx, call, self.statement())

    def _helper_call(self, node: cst.Call, helper: str, parameter: str, position: int) -> None:
        """`train_data = batchify(corpus.train, bsz)` where batchify returns `data.to(device)`."""
        arg = call_arg(node, parameter, position)
        if arg is None:
            return
        evidence = data_evidence(self.ctx, arg.value)
        if evidence == STRONG or (evidence == WEAK and at_setup_level(self.ctx)):
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

    def finish(self) -> None:
        """Report the moves of whole data sets, now that the module shows how each
        tensor is used: indexed batch by batch afterwards (whole, whatever its
        name), or fed whole to a model in a module that never batches (full-batch
        training: the data set is the batch, so its size is the batch's)."""
        for dataset, statement, names, move in self._gpu_tensor_datasets:
            if move is not None:  # reported where its first tensor goes to the GPU
                self._report_once(move.node, self.MESSAGE.format(
                    source=_shorten(move.source), how=" and wrapped in a TensorDataset"),
                    move.statement)
            else:
                self._report_once(dataset, self.TENSOR_DATASET_MESSAGE, statement,
                                  host_dataset_fix(dataset, names, self._loaders,
                                                   self._loaders_moved_per_batch, self.ctx))
        for helper, position, name, place in self._passed:
            if position in self._slicing_helpers.get(helper, ()):
                self._sliced.setdefault(name, []).append((place, None))
        batched = [(move, subscript) for move in self._moves if move.maybe_data
                   for subscript in [batched_after(move, self._sliced)] if subscript is not False]
        full_batch = set() if batched else full_batch_names(self._moves, self._fed_whole)
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

    def _place(self) -> _Place:
        self._order += 1
        return _Place(self.ctx.function, self._order)

    def _step_unit(self) -> cst.CSTNode:
        """Where the names used with a model call are looked for: its function
        (one training step), else its statement at the top level
        (`loss = loss_fn(model(X_train), y_train)` in a notebook's epoch loop)."""
        if self.ctx.function is not None:
            return self.ctx.function
        return self.statement() or self.ctx.scopes[0].node

    def _report_once(self, node: cst.Call, message: str,
                     statement: cst.CSTNode | None = None, fix: FixPlan | None = None) -> None:
        statement = statement or self.statement()
        if id(statement) not in self._flagged_statements:
            self._flagged_statements.add(id(statement))
            self.report(node, message, statement, fix=fix)

