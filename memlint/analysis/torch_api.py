"""Every PyTorch API name memlint reasons about, in one place.

Names are fully qualified, as `ImportTable.qualify` spells a call after
resolving the module's imports (`from torch import no_grad as ng` -> `torch.no_grad`).
Each `torch.*` name here was checked against torch 2.13.0: `tests/test_torch_api.py`
resolves every one in the installed torch, so an upgrade that renames or drops
one fails there rather than silently changing findings. Names of other libraries
(numpy, DeepSpeed, torchvision) are listed beside the torch name they stand for.
"""

from __future__ import annotations

import re

#: the torch release the names below were checked against
CHECKED_AGAINST = "2.13.0"

# -- tensors ------------------------------------------------------------------------------

#: `torch.<T>(...)` builds a CPU tensor, `torch.cuda.<T>` a CUDA one (legacy constructors)
TENSOR_TYPES: tuple[str, ...] = (
    "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
    "IntTensor", "ShortTensor", "ByteTensor", "CharTensor", "BoolTensor")
CUDA_TENSOR_TYPES: frozenset[str] = frozenset(TENSOR_TYPES) - {"Tensor"}
#: calls whose result holds the same data as their first argument
SAME_DATA_CALLS: frozenset[str] = frozenset({
    "torch.tensor", "torch.as_tensor", "torch.asarray", "torch.from_numpy",
    "numpy.array", "numpy.asarray", "numpy.ascontiguousarray",
    *(f"torch.{t}" for t in TENSOR_TYPES)})
#: factories of new tensors, on the CPU unless given a device
HOST_FACTORIES: frozenset[str] = frozenset(f"torch.{name}" for name in (
    "randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "linspace",
    "FloatTensor", "Tensor", "LongTensor", "DoubleTensor", "tensor", "from_numpy"))
#: calls that copy their argument into a new tensor, on the CPU unless given a device
HOST_COPIES: tuple[str, ...] = ("torch.tensor", "torch.from_numpy", "torch.as_tensor")
#: ranges of indices, not data (`for i in torch.arange(n)`)
INDEX_RANGES: frozenset[str] = frozenset({"range", "numpy.arange", "torch.arange"})
#: Factories of integer tensors, and the integer dtypes.
INTEGER_FACTORIES: frozenset[str] = frozenset({"torch.arange", "torch.randint", "torch.randperm",
                                               "torch.LongTensor", "torch.IntTensor"})
INTEGER_DTYPES: frozenset[str] = frozenset(f"torch.{name}" for name in (
    "long", "int64", "int", "int32", "int16", "int8", "uint8", "short"))
#: tensor factories whose result is floating point unless told otherwise
FLOAT_FACTORIES: frozenset[str] = frozenset({"torch.randn", "torch.rand", "torch.randn_like",
                                             "torch.rand_like", "torch.normal",
                                             "torch.FloatTensor", "torch.linspace"})
FLOAT_DTYPES: frozenset[str] = frozenset(f"torch.{name}" for name in (
    "float", "float32", "float16", "half", "bfloat16", "double", "float64"))
#: functions that join tensors into one (a growing result when fed their own output)
CONCATENATIONS: frozenset[str] = frozenset({
    "torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.hstack",
    "torch.vstack", "torch.row_stack", "torch.column_stack", "torch.dstack"})

#: the base class of every model
MODULE_BASE = "torch.nn.Module"

# -- grad mode ----------------------------------------------------------------------------

#: context managers (and decorators) that turn autograd off, with their short name
GRAD_OFF_CONTEXTS: dict[str, str] = {
    "torch.no_grad": "no_grad",
    "torch.autograd.no_grad": "no_grad",
    "torch.autograd.grad_mode.no_grad": "no_grad",
    "torch.inference_mode": "inference_mode",
    "torch.autograd.inference_mode": "inference_mode",
    "torch.autograd.grad_mode.inference_mode": "inference_mode",
}
#: context managers (and decorators) that turn autograd back on
GRAD_ON_CONTEXTS: dict[str, str] = {
    "torch.enable_grad": "enable_grad",
    "torch.autograd.enable_grad": "enable_grad",
    "torch.autograd.grad_mode.enable_grad": "enable_grad",
}
#: `set_grad_enabled(flag)`: a context manager, and a plain call that switches the mode
GRAD_MODE_SETTERS: frozenset[str] = frozenset({
    "torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
    "torch.autograd.grad_mode.set_grad_enabled"})

#: calls that return their callable argument compiled (`self.step =
#: torch.compile(self.step)`): it runs where the result is called, not there
COMPILERS: frozenset[str] = frozenset({"torch.compile", "torch.jit.script"})
#: run the function they are handed once, on an example input, to record its operators
TRACERS: frozenset[str] = frozenset({"torch.onnx.export", "torch.jit.trace",
                                     "torch.jit.trace_module", "torch.export.export"})

# -- autograd -----------------------------------------------------------------------------

#: gradients of outputs with respect to inputs, inside a forward too (SDF normals, forces)
AUTOGRAD_GRAD = "torch.autograd.grad"
#: functions that run a backward pass
AUTOGRAD_ENTRY: frozenset[str] = frozenset({"torch.autograd.backward", AUTOGRAD_GRAD})
#: calls that ask whether autograd records here
GRAD_MODE_QUERIES: frozenset[str] = frozenset({"torch.is_grad_enabled"})
#: calls that show a function wants gradients (Grad-CAM, adversarial attacks, training)
GRAD_USERS: frozenset[str] = frozenset({
    *AUTOGRAD_ENTRY, "torch.autograd.functional.jacobian", "torch.autograd.functional.hessian",
    "torch.autograd.functional.vjp", "torch.autograd.functional.jvp", "torch.func.grad",
    "torch.func.vjp"})
#: `Variable(x, volatile=True)`: `volatile` does nothing since PyTorch 0.4
VARIABLE: frozenset[str] = frozenset({"torch.autograd.Variable",
                                      "torch.autograd.variable.Variable"})
#: `torch.nn.functional` losses (their result is a loss, not a model output)
FUNCTIONAL_LOSS = re.compile(r"torch\.nn\.functional\.(\w*loss|cross_entropy|"
                             r"binary_cross_entropy\w*|kl_div|nll_loss)$")

# -- data ---------------------------------------------------------------------------------

#: torch's DataLoader, and the loaders PyTorch Geometric derives from it
#: (PyG 2: same worker processes, same `pin_memory`; its batches' `.to()`
#: copies every tensor they hold)
DATA_LOADERS: frozenset[str] = frozenset({
    "torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
    "torch_geometric.loader.DataLoader", "torch_geometric.loader.DataListLoader",
    "torch_geometric.loader.DenseDataLoader", "torch_geometric.data.DataLoader",
})
TENSOR_DATASETS: frozenset[str] = frozenset({"torch.utils.data.TensorDataset",
                                             "torch.utils.data.dataset.TensorDataset"})

# -- devices ------------------------------------------------------------------------------

DEVICE_FACTORY = "torch.device"
DEVICE_FACTORIES: frozenset[str] = frozenset({DEVICE_FACTORY})
#: `with torch.cuda.device(i):` makes GPU i the current device inside the block
DEVICE_GUARDS: frozenset[str] = frozenset({"torch.cuda.device", "torch.cuda.device_of"})
#: calls that make a GPU the current device for the rest of the process (the
#: accelerate and DeepSpeed ones call set_device for the rank they run in)
SETS_CURRENT_DEVICE: frozenset[str] = frozenset({
    "torch.cuda.set_device", "torch.accelerator.set_device_index",
    "torch.accelerator.set_device_idx",
    "accelerate.Accelerator", "accelerate.accelerator.Accelerator", "accelerate.PartialState",
    "deepspeed.initialize", "deepspeed.init_distributed", "deepspeed.comm.init_distributed"})
CURRENT_CUDA_DEVICE: frozenset[str] = frozenset({"torch.cuda.current_device",
                                                 "torch.accelerator.current_accelerator"})
SET_DEFAULT_DEVICE: frozenset[str] = frozenset({"torch.set_default_device"})
#: torch.cuda functions that create the CUDA context (is_available, device_count,
#: manual_seed and empty_cache do not: they query the driver or are deferred)
CUDA_INITIALISERS: frozenset[str] = frozenset(f"torch.cuda.{name}" for name in (
    "init", "current_device", "set_device", "synchronize", "get_device_name",
    "get_device_capability", "get_device_properties", "mem_get_info", "current_stream",
    "default_stream", "Stream", "Event", "stream", "device", "ipc_collect",
    "can_device_access_peer", "get_rng_state", "set_per_process_memory_fraction"))
#: calls that create a context on the current device when given none: measured on
#: an H100, torch 2.11, each in a fresh process (`empty_cache`, `manual_seed`,
#: `memory_allocated`, `get_device_properties`, `current_device` were measured not to)
CONTEXT_ON_CURRENT_DEVICE: dict[str, str] = {
    "torch.cuda.synchronize": "device", "torch.cuda.mem_get_info": "device",
    "torch.cuda.Stream": "device"}

# -- processes ----------------------------------------------------------------------------

#: calls that run one process per GPU, or join such a group (`mp.spawn` alone is
#: not: Hogwild and RPC examples spawn CPU workers and let one of them use the GPU)
RUNS_PER_GPU: frozenset[str] = frozenset({
    "torch.distributed.init_process_group", "deepspeed.initialize",
    "deepspeed.init_distributed", "torch.distributed.launcher.api.elastic_launch"})
#: calls that start or wrap one process per GPU (what a checkpoint load in the same
#: program then does once per rank)
#: starts one process per `nprocs` running a function (`mp.spawn(fn, ...)`)
SPAWN = "torch.multiprocessing.spawn"
RANK_STARTERS: frozenset[str] = frozenset({
    "torch.distributed.init_process_group", SPAWN,
    "torch.nn.parallel.DistributedDataParallel"})

#: the methods of a data set that a DataLoader's worker processes run
DATASET_ITEM_METHODS: tuple[str, ...] = ("__getitem__", "__getitems__", "__iter__", "__next__")
#: wrappers that scatter their inputs onto the GPUs (a host tensor given to one still
#: runs the model there)
DATA_PARALLEL_WRAPPERS: frozenset[str] = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel"})

# -- serialization ------------------------------------------------------------------------

LOADS: frozenset[str] = frozenset({"torch.load", "torch.serialization.load"})
SAVES: frozenset[str] = frozenset({"torch.save", "torch.serialization.save"})

# -- model sizes --------------------------------------------------------------------------

#: parameters (millions) of library architectures, by constructor name
#: (torchvision's model tables; timm's names start the same way)
ARCHITECTURE_PARAMETERS: dict[str, float] = {
    "resnet18": 11.7, "resnet34": 21.8, "resnet50": 25.6, "resnet101": 44.5,
    "resnet152": 60.2, "resnext50_32x4d": 25.0, "resnext101_32x8d": 88.8,
    "resnext101_64x4d": 83.5, "wide_resnet50_2": 68.9, "wide_resnet101_2": 126.9,
    "vgg11": 132.9, "vgg13": 133.1, "vgg16": 138.4, "vgg19": 143.7, "alexnet": 61.1,
    "densenet121": 8.0, "densenet161": 28.7, "densenet169": 14.1, "densenet201": 20.0,
    "inception_v3": 27.2, "googlenet": 6.6, "mobilenet_v2": 3.5, "mobilenet_v3_large": 5.5,
    "mobilenet_v3_small": 2.5, "efficientnet_b0": 5.3, "efficientnet_b1": 7.8,
    "efficientnet_b2": 9.1, "efficientnet_b3": 12.2, "efficientnet_b4": 19.3,
    "efficientnet_b5": 30.4, "efficientnet_b6": 43.0, "efficientnet_b7": 66.3,
    "vit_b_16": 86.6, "vit_b_32": 88.2, "vit_l_16": 304.3, "vit_l_32": 306.5,
    "vit_h_14": 632.0, "vit_tiny_patch16": 5.7, "vit_small_patch16": 22.1,
    "vit_base_patch16": 86.6, "vit_base_patch32": 88.2, "vit_large_patch16": 304.3,
    "swin_t": 28.3, "swin_s": 49.6, "swin_b": 87.8, "swin_tiny_patch4": 28.3,
    "swin_base_patch4": 87.8, "swin_large_patch4": 196.5, "convnext_tiny": 28.6,
    "convnext_small": 50.2, "convnext_base": 88.6, "convnext_large": 197.8,
    "deeplabv3_resnet50": 42.0, "deeplabv3_resnet101": 61.0, "fcn_resnet50": 35.3,
    "fcn_resnet101": 54.3, "fasterrcnn_resnet50_fpn": 41.8, "maskrcnn_resnet50_fpn": 44.4,
    "retinanet_resnet50_fpn": 34.0, "keypointrcnn_resnet50_fpn": 59.1,
}
#: parameters (millions) of a hub model by the size word of its name; "base"
#: stands for one whose name is a setting (what is fine-tuned is rarely smaller)
HUB_MODEL_PARAMETERS: dict[str, float] = {
    "tiny": 4.4, "mini": 11.0, "distil": 66.0, "large": 335.0, "base": 110.0, "xl": 1500.0,
}
#: parameters (millions) from which a second copy of the weights (float32:
#: about 100 MiB, a ResNet-50's) is worth a finding of its own
LARGE_MODEL_PARAMETERS = 25.0

# -- files fetched from elsewhere ---------------------------------------------------------

#: calls that write a file fetched from a URL or a hub, with where they put it
#: (position, keyword): what a load of that path reads is a published file
DOWNLOADS_TO: dict[str, tuple[int, str]] = {
    "urllib.request.urlretrieve": (1, "filename"),
    "torch.hub.download_url_to_file": (1, "dst"),
    "gdown.download": (1, "output"),
    "wget.download": (1, "out"),
}
#: methods through which a library writes a model's files under names the
#: code does not spell (transformers' and PEFT's `save_pretrained`, the HF
#: Trainer's `save_model` and `save_state`, accelerate's `save_state`)
LIBRARY_SAVES: frozenset[str] = frozenset({"save_pretrained", "save_model", "save_state"})
#: the files they write that `torch.load` reads, each with whether it holds
#: CPU values only (the weights and optimizer state stay where they were)
LIBRARY_FILES: dict[str, bool] = {
    "pytorch_model.bin": False, "adapter_model.bin": False, "optimizer.pt": False,
    "optimizer.bin": False, "training_args.bin": True}
#: calls that fetch a file and return its local path
DOWNLOADS_RETURNING: frozenset[str] = frozenset({
    "huggingface_hub.hf_hub_download", "huggingface_hub.cached_download",
    "huggingface_hub.file_download.hf_hub_download", "transformers.utils.cached_file",
    "gdown.cached_download"})

# -- `from torch import *` ----------------------------------------------------------------

#: What `from <module> import *` brings that rules ask about: the public names
#: of those modules, listed here rather than imported (memlint never imports
#: the code it checks, nor torch).
STAR_EXPORTS: dict[str, frozenset[str]] = {
    "torch": frozenset({
        "tensor", "as_tensor", "asarray", "from_numpy", "zeros", "ones", "empty", "full",
        "zeros_like", "ones_like", "empty_like", "full_like", "rand", "randn", "randint",
        "randperm", "rand_like", "randn_like", "randint_like", "arange", "linspace",
        "logspace", "eye", "normal", "bernoulli", "multinomial", "stack", "cat", "no_grad",
        "enable_grad", "inference_mode", "set_grad_enabled", *TENSOR_TYPES}),
    "torch.utils.data": frozenset({
        "DataLoader", "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset",
        "Subset", "random_split"}),
}
