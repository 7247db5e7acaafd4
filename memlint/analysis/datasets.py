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
from memlint.analysis.context import Context
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import DATA_LOADERS

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
