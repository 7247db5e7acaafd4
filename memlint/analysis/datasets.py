"""What a data set is: a value sized by the data rather than by the model or
the batch. MEM001 asks it of a move to the GPU ("is this the whole data
set?"); MEM010 and MEM003 ask which loops run over the data.

A data set is known by what the code does with it (read whole from files,
iterated sample by sample by a loop whose length is the data's, indexed per
step) and, where that is not shown, by the words of its name (`X_train`,
`corpus`). Fixed-size values (masks, noise, constants, statistics, one batch)
are not data sets.
"""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import BindingSite, Context
from memlint.analysis.devices import cuda_tensor_type
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.torch_api import DATA_LOADERS, SAME_DATA_CALLS, TENSOR_TYPES
from memlint.analysis.walker import children

#: Readers of whole files into memory: what they return is sized by the file.
READERS = {"numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile",
           "numpy.memmap"}
_READER_PREFIXES = ("pandas.read_",)
#: Readers of a pickled collection: a list or dict of samples, read whole.
_COLLECTION_READERS = {"pickle.load", "torch.load", "joblib.load", *READERS}


def reads_whole_file(qualified: str) -> bool:
    """`np.load`, `pd.read_csv`: the result holds a whole file's contents."""
    return qualified in READERS or qualified.startswith(_READER_PREFIXES)


# Words in a variable name that say "this is the data set", split like `X_train` -> x, train.
SPLITS = {"train", "training", "test", "testing", "val", "valid", "validation", "holdout",
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
#: Words in a name that say "one batch or sample", whatever else it says.
_ONE_SAMPLE_WORDS = {"batch", "minibatch", "mb", "state", "states", "obs", "observation",
                     "observations", "action", "actions", "reward", "rewards"}
#: Last words that make a name a tool working on data, not data: `data_processor`,
#: `train_transform`, `y_normalizer` (the last word of an English compound names it).
_TOOL_WORDS = {"processor", "processors", "transform", "transforms", "normalizer",
               "normaliser", "scaler", "sampler", "loader", "loaders", "collator",
               "tokenizer", "augmenter", "pipeline", "module", "model", "handler", "manager"}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

NONE, UNKNOWN, WEAK, STRONG = range(4)


def name_words(name: str) -> list[str]:
    """`X_train` -> x, train; `trainLoader` -> train, loader."""
    return [w.lower() for w in _WORD.findall(name)]


def name_evidence(name: str) -> int:
    """How surely a variable name holds a whole data set, from its words alone."""
    parts = [p for p in name.split(".") if p not in ("self", "cls")]
    if len(parts) > 1 and not _data_like(parts[-1]):
        return NONE  # an attribute of a data set (`TRAIN_DATASET.labelweights`), not its data
    last_words = name_words(parts[-1]) if parts else []
    if last_words and last_words[-1] in _TOOL_WORDS:
        return NONE  # `data_processor.to(device)`: what processes the data set, not the data
    words = {w for part in parts for w in name_words(part)}
    words |= {part.lower().replace("_", "") for part in parts}
    if words & _DATASET_WORDS or (words & SPLITS and words & _DATA_WORDS):
        return STRONG
    if words & _ONE_SAMPLE_WORDS:
        return NONE
    if words & _WEAK_DATA_WORDS or (parts and parts[-1] in ("X", "Y", *_SPLIT_NAMES)):
        return WEAK
    return UNKNOWN


def _data_like(part: str) -> bool:
    """Whether one part of a dotted name could name data (`x`, `train_data`, `targets`)."""
    words = {*name_words(part), part.lower().replace("_", "")}
    return bool(words & (_DATA_WORDS | _DATASET_WORDS | SPLITS | _WEAK_DATA_WORDS)) \
        or part in ("X", "Y")




#: Listings of the files of a data set (`sorted(glob(folder + "/*"))`).
_LISTINGS = {"glob.glob", "glob.iglob", "os.listdir", "os.scandir"}
_LISTING_METHODS = {"readlines", "glob", "rglob", "iterdir"}
#: What a loop's iterable is wrapped in (`enumerate(tqdm(names))`).
_WRAPPERS = {"enumerate", "tqdm", "tqdm.tqdm", "zip", "iter", "list", "sorted", "reversed"}


def iterates_samples(loop: cst.CSTNode, ctx: Context) -> bool:
    """A `for` over the samples of a data set, so that what it keeps grows
    with the data: over a collection read whole (`dataset = pickle.load(f)`,
    a Dataset, a DataLoader), or over a count of one (`range(len(names))`
    with `names = sorted(glob(...))`). Not a count the code fixes
    (`range(epochs)`, `range(hp.train.rep_discriminator)`), nor one batch's
    size (`range(x.shape[0])`), nor a literal list."""
    if not isinstance(loop, cst.For):
        return False
    iterable = _unwrapped(loop.iter)
    if isinstance(iterable, cst.Call) and dotted_name(iterable.func) == "range":
        return any(_counts_a_data_set(arg.value, ctx) for arg in iterable.args)
    return _is_data_set(iterable, ctx)


def iterates_loaded_collection(loop: cst.For, ctx: Context) -> bool:
    """`for data in dataset:` over a collection read whole from a file
    (`pickle.load`, `torch.load`, `np.load`): its elements outlive the loop,
    unlike a DataLoader's batches, made afresh each iteration."""
    site = ctx.binding_site(dotted_name(loop.iter) or "")
    value = site.value if site is not None and site.unpacked_from is None else None
    return isinstance(value, cst.Call) and ctx.qualify(value.func) in _COLLECTION_READERS


def _unwrapped(node: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(node, cst.Call) and node.args \
            and (dotted_name(node.func) or "") in _WRAPPERS:
        node = node.args[0].value
    return node


def _is_data_set(node: cst.BaseExpression, ctx: Context) -> bool:
    """A name bound to a collection read whole from files, a file listing, a
    Dataset or a DataLoader."""
    name = dotted_name(node)
    site = ctx.binding_site(name) if name is not None else None
    if site is None or site.unpacked_from is not None:
        return False
    value = _unwrapped(site.value)
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in ("tolist", "values", "items"):
        value = value.func.value
    if not isinstance(value, cst.Call):
        return False
    qualified = ctx.qualify(value.func) or ""
    method = value.func.attr.value if isinstance(value.func, cst.Attribute) else ""
    return qualified in _COLLECTION_READERS or qualified.startswith(_READER_PREFIXES) \
        or qualified in _LISTINGS or method in _LISTING_METHODS \
        or qualified in DATA_LOADERS or qualified.startswith("torch.utils.data.")


def _counts_a_data_set(node: cst.BaseExpression, ctx: Context) -> bool:
    """`len(names)` of a data set (`_is_data_set`), also inside `min(...)` or `n - 1`."""
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Call):
            if dotted_name(current.func) == "len" and current.args:
                if _is_data_set(current.args[0].value, ctx):
                    return True
            elif dotted_name(current.func) in ("min", "max", "int"):
                pending.extend(arg.value for arg in current.args)
        elif isinstance(current, cst.BinaryOperation):
            pending.extend((current.left, current.right))
    return False


#: Methods whose result is the same tensor's data, where it was.
_SAME_TENSOR_METHODS = {"float", "double", "half", "long", "int", "bool", "reshape", "view",
                        "contiguous", "squeeze", "unsqueeze", "transpose", "permute",
                        "flatten", "clone", "detach", "pin_memory"}


def kept_as_is(value: cst.BaseExpression) -> set[str]:
    """The names whose tensors a stored value is, on their device: `x`,
    `[x, y]`, `x.float()`; not `x.cpu().numpy()` nor what a call makes of them."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in _SAME_TENSOR_METHODS:
        value = value.func.value
    if isinstance(value, (cst.List, cst.Tuple)):
        return {n for e in value.elements for n in kept_as_is(e.value)}
    name = dotted_name(value)
    return {name} if name is not None else set()


class SampleLoops:
    """Per loop over a data set's samples (`iterates_samples`), the names that
    hold the current sample: the loop's targets and what is made from them
    in its body (`net_in, net_gt = prepare(task, id, names)`). A walker
    analysis (`ctx.shared(SampleLoops)`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: list[tuple[cst.For, set[str]]] = []

    def visit_For(self, node: cst.For) -> None:
        if iterates_samples(node, self.ctx):
            self._open.append((node, names_in(node.target)))

    def leave_For(self, node: cst.For) -> None:
        if self._open and self._open[-1][0] is node:
            self._open.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if not self._open:
            return
        read = names_in(node.value)
        for _, samples in self._open:
            if read & samples:
                for target in node.targets:
                    samples.update(names_in(target.target))

    def loop_of(self, value: cst.BaseExpression) -> cst.For | None:
        """The innermost open loop over samples whose current sample `value` reads."""
        read = names_in(value)
        for loop, samples in reversed(self._open):
            if read & samples:
                return loop
        return None


#: Libraries whose `Dataset` classes are not fed to a torch DataLoader.
_FOREIGN_DATASET_ROOTS = {"datasets", "tensorflow", "tf", "keras", "tensorflow_datasets",
                          "paddle", "mindspore", "jax", "flax", "ray"}


def is_dataset_class(class_name: str, index: ModuleIndex, ctx: Context) -> bool:
    """Whether a class of this module is a torch Dataset: a base along its
    lineage is `torch.utils.data.*Dataset`, torchvision's, or a project base
    named `...Dataset` (not Hugging Face's or TensorFlow's)."""
    for info in index.lineage(class_name):
        for base in info.bases:
            if isinstance(base, cst.Name) and base.value in index.classes:
                continue  # judged as it comes up in the lineage
            if _is_dataset_base(base, ctx):
                return True
    return False


def _is_dataset_base(base: cst.BaseExpression, ctx: Context) -> bool:
    qualified = ctx.names.qualify(base)
    if qualified is not None:
        if qualified.startswith("torch.utils.data."):
            # a Dataset runs in the workers; a DataLoader or a Sampler subclass's
            # `__iter__` runs in the main process, around the workers
            last = qualified.rsplit(".", 1)[-1]
            return last.endswith("Dataset") or last == "Subset"
        if qualified.startswith("torchvision.datasets."):
            return True
        if qualified.split(".", 1)[0] in _FOREIGN_DATASET_ROOTS:
            return False
    # a base from elsewhere in the project (`from .base import BaseDataset`)
    name = qualified or dotted_name(base) or ""
    return name.rsplit(".", 1)[-1].endswith("Dataset")


# How strongly an expression looks like a whole data set: what MEM001 weighs
# for the value a move puts on the GPU.

#: Methods whose result is the same data (cast, reshaped, moved).
SAME_DATA_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "bool", "byte",
                     "astype", "reshape", "view", "contiguous", "squeeze", "unsqueeze",
                     "transpose", "permute", "flatten", "clone", "copy", "type", "to",
                     "pin_memory", "numpy", "detach", "requires_grad_"}
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
        return _call_evidence(ctx, node, depth)
    if isinstance(node, cst.Attribute):
        if node.attr.value == "values":
            return _frame_evidence(ctx, node.value, depth)  # `df.values`
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


def _call_evidence(ctx: Context, node: cst.Call, depth: int) -> int:
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
            return _frame_evidence(ctx, func.value, depth)
        if func.attr.value == "unsqueeze" and _leading_axis(node):
            return NONE  # `transform(image).unsqueeze(0)`: one sample made a batch of one
        if func.attr.value in SAME_DATA_METHODS:
            return data_evidence(ctx, func.value, depth + 1)
        if func.attr.value in ("sample", "next", "__next__"):
            return NONE  # a replay-buffer / data-frame sample, an iterator's next batch
    if isinstance(func, cst.Name) and func.value in ("next", "iter"):
        return NONE  # one batch of a loader
    return UNKNOWN


def _frame_evidence(ctx: Context, frame: cst.BaseExpression, depth: int) -> int:
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
        for name in names_within(element.slice):
            words = set(name_words(name))
            if words & _BATCH_INDEX_WORDS and not words & SPLITS:
                return True
    return False


def _literal_rows(index: cst.BaseExpression) -> bool:
    """`0`, `[1, 2]`, `torch.tensor([1])`: rows picked by number."""
    if isinstance(index, cst.Call) and len(index.args) == 1:
        index = index.args[0].value
    if isinstance(index, (cst.List, cst.Tuple)):
        return bool(index.elements) and all(isinstance(e.value, cst.Integer)
                                            for e in index.elements)
    return isinstance(index, cst.Integer)


def _value_given(site: BindingSite) -> cst.BaseExpression:
    """What an assignment gave the name: its element of `a, b = x, y`, the
    whole unpacked value of `a, b = f()` (the element is unknown), else the value."""
    source = site.unpacked_from
    if source is None:
        return site.value
    if (type(source) is cst.Tuple or type(source) is cst.List) and site.unpacked_index is not None \
            and site.unpacked_index < len(source.elements) \
            and not any(type(e) is cst.StarredElement for e in source.elements):
        return source.elements[site.unpacked_index].value
    return source


def _leading_axis(call: cst.Call) -> bool:
    """`unsqueeze(0)` / `unsqueeze(dim=0)`: a new first axis of size one."""
    axis = call_arg(call, "dim", position=0)
    return axis is not None and type(axis.value) is cst.Integer and axis.value.value == "0"


def _moves_itself(value: cst.BaseExpression, name: str) -> bool:
    """`x.to(device)`, `x.cuda()` as the value bound to `x`: the same data, moved."""
    return type(value) is cst.Call and type(value.func) is cst.Attribute \
        and value.func.attr.value in ("to", "cuda") and dotted_name(value.func.value) == name


def names_within(node: cst.CSTNode) -> list[str]:
    """Every plain name in an expression, attribute names left out (`i`, `bs`, `perm`)."""
    found: list[str] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.append(current.value)
        elif not isinstance(current, cst.Attribute):
            stack.extend(children(current))
    return found


def _sizes_only(call: cst.Call, qualified: str) -> bool:
    """`torch.FloatTensor(3, 4)`, `torch.BoolTensor(x.size())`: a shape, not data."""
    if qualified.rsplit(".", 1)[-1] not in TENSOR_TYPES:
        return False
    first = call.args[0].value
    if len(call.args) > 1 and call.args[1].keyword is None:
        return True
    if isinstance(first, cst.Integer):
        return True
    if isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute):
        return first.func.attr.value == "size"
    return isinstance(first, cst.Attribute) and first.attr.value == "shape"


def _unimported_torch(func: cst.BaseExpression) -> str:
    name = dotted_name(func) or ""
    return name if name.startswith("torch.") else ""


def _is_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.Integer, cst.Float,
                             cst.SimpleString, cst.ListComp, cst.UnaryOperation))


#: Calls that decode one sample from an image, audio or video file into numbers.
MEDIA_DECODERS = {
    "PIL.Image.open", "cv2.imread", "cv2.VideoCapture", "imageio.imread", "imageio.v2.imread",
    "imageio.v3.imread", "skimage.io.imread", "torchvision.io.read_image",
    "torchvision.io.decode_image", "torchvision.io.read_video", "torchvision.io.decode_jpeg",
    "torchvision.datasets.folder.default_loader", "torchvision.datasets.folder.pil_loader",
    "torchaudio.load", "soundfile.read", "librosa.load", "scipy.io.wavfile.read",
}
#: Transforms that turn a decoded image into a floating-point tensor.
FLOAT_IMAGE_TRANSFORMS = {
    "torchvision.transforms.ToTensor", "torchvision.transforms.functional.to_tensor",
    "torchvision.transforms.v2.ToTensor", "torchvision.transforms.v2.ToDtype",
}
#: Data sets of decoded images, audio or video.
_MEDIA_DATASETS = ("torchvision.datasets.", "torchaudio.datasets.")


def decodes_media(qualified: str | None) -> bool:
    """A call that makes floating-point samples out of media files."""
    return qualified in MEDIA_DECODERS or qualified in FLOAT_IMAGE_TRANSFORMS


def is_media_dataset(qualified: str | None) -> bool:
    """A library data set (or base class) of decoded images, audio or video."""
    return bool(qualified) and qualified.startswith(_MEDIA_DATASETS)  # type: ignore[union-attr]


def gives_media_samples(dataset: cst.BaseExpression | None, ctx: Context) -> bool:
    """A data set whose samples are images, audio or video decoded into
    floating-point tensors, as far as its construction shows: a torchvision or
    torchaudio data set, or one given a transform that makes float tensors
    (`transform=transforms.Compose([..., transforms.ToTensor()])`, also through
    a name bound to it). A project's own data set class is asked separately
    (does a method of it decode media?). A data set picked in the branches of
    an `if` chain (`dataset = dset.ImageFolder(...)` / `elif ...: dataset =
    dset.CIFAR10(...)`) is one where every branch is."""
    if isinstance(dataset, cst.IfExp):
        return all(gives_media_samples(ctx.resolve(branch), ctx)
                   for branch in (dataset.body, dataset.orelse))
    if not isinstance(dataset, cst.Call):
        return False
    if is_media_dataset(ctx.qualify(dataset.func)):
        return True
    pending: list[cst.CSTNode] = [ctx.resolve(arg.value) for arg in dataset.args]
    for _ in range(200):
        if not pending:
            break
        node = pending.pop()
        if isinstance(node, cst.Call) and decodes_media(ctx.qualify(node.func)):
            return True
        if isinstance(node, cst.Name):
            resolved = ctx.resolve(node)
            if resolved is not node:
                pending.append(resolved)
            continue
        pending.extend(children(node))
    return False
