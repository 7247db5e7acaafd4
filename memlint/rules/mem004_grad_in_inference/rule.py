"""Forward passes in inference code with autograd still recording."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import libcst as cst

from memlint.analysis.autograd_values import BackwardFlows
from memlint.analysis.context import BindingSite, Context, Scope
from memlint.analysis.devices import creates_on_cuda, moves_to_cuda
from memlint.analysis.models import CHAINED, built_kind, constructed_kind, is_loss_name, unchained
from memlint.analysis.module_index import ClassInfo, FunctionInfo, ModuleIndex
from memlint.analysis.project import (Condition, Either, UnlessCalledToTrain,
                                      UnlessCallersDisableGrad, UnlessForwardDisablesGrad,
                                      UnlessProjectOnCpu)
from memlint.analysis.names import call_arg, dotted_name, literal_bool
from memlint.analysis.torch_api import GRAD_USERS, HOST_FACTORIES, VARIABLE
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions

#: Words of a function name that say it runs inference (`run_validation`, `evalModel`).
_INFERENCE_WORDS = {"eval", "evaluate", "evaluation", "validate", "validation", "valid", "val",
                    "test", "testing", "predict", "prediction", "predictions", "infer",
                    "inference", "generate", "generation", "sample", "sampling"}
#: ... unless it trains too (`train_and_evaluate`, `fit_predict`).
_TRAINING_WORDS = {"train", "training", "fit", "finetune", "optimize", "backward", "attack",
                   "adversarial", "saliency", "gradcam", "cam", "grad", "gradient", "gradients"}
#: Names real code gives to modules when their binding is not visible here.
_MODEL_NAMES = re.compile(r"(?:.*_)?(model|net|network|encoder|decoder|generator|"
                          r"discriminator|classifier|backbone|critic|actor|policy|teacher|"
                          r"student|unet|vae|autoencoder|netg|netd)$|.*model$")
_MODULE_FACTORIES = ("torch.nn.", "torchvision.models.", "timm.", "torch.hub.load",
                     "transformers.")
#: Wrappers that are called like modules but disable grad in their own predict path.
_SELF_GUARDED = ("ultralytics.", "transformers.pipeline", "sentence_transformers.")
#: `setup_model(...)`, `load_model(...)`: functions about a model, not a model.
_VERB_PREFIXES = {"setup", "load", "build", "get", "create", "make", "init", "prepare", "save",
                  "export", "wrap", "compile", "update", "copy", "run", "call", "fit", "train",
                  "to", "eval", "evaluate", "convert", "freeze", "unwrap", "set", "apply", "print",
                  "log", "check", "is", "has", "reset", "register", "fuse", "quantize", "prune"}
_MODEL_BASE_SUFFIXES = ("Model", "Module", "Net", "Network")
_TORCH_ROOTS = ("torch", "torchvision", "transformers", "timm", "lightning", "pytorch_lightning")
#: `zero_grad()`: gradients are computed in this step, in a backward here or in
#: a library call handed the optimizer (`loss_scaler(loss, optimizer)`)
_GRAD_METHODS = {"backward", "manual_backward", "requires_grad_", "retain_grad", "zero_grad"}
_LIGHTNING_BASES = ("LightningModule",)
_LIGHTNING_HOOK = re.compile(r"(validation|val|test|predict)_step$|.*_epoch_(start|end)$|on_.*")
#: `DummyModel(...)`, `Net()`: calling a class builds a module, it runs no forward
#: (`G_AB`, `netG`, `model` are instances)
_CLASS_NAME = re.compile(r"[A-Z](?=\w*[a-z])\w*")  # `MobileNetV3_Small`, not `G_AB`


@dataclass
class _Unit:
    """What one function (or the module's top level) did, in source order."""

    node: cst.FunctionDef | None  # None: the module's top level
    class_name: str | None
    evaluated: dict[str, bool] = field(default_factory=dict)  # module name -> in eval mode
    eval_calls: dict[str, cst.Call] = field(default_factory=dict)  # module name -> its last .eval()
    on_gpu: dict[str, bool] = field(default_factory=dict)  # module name -> moved to a CUDA device
    forward: tuple[cst.Call, cst.CSTNode | None, str] | None = None  # first unguarded forward
    volatile: tuple[cst.Call, cst.CSTNode | None] | None = None  # first Variable(volatile=True)
    #: ... after a `.eval()`: the inference part of a training loop
    volatile_after_eval: bool = False
    volatile_names: set[str] = field(default_factory=set)  # names bound to a volatile Variable
    volatile_fed: bool = False  # one is fed to a model (a DQN's target forward in a training step)
    wants_grad: bool = False
    #: the first unguarded forward ran after a `.eval()` of its model
    forward_after_eval: bool = False
    #: a backward (or `requires_grad = True`) comes after that forward
    grad_after_forward: bool = False
    #: models whose every parameter it sets `requires_grad = False`
    frozen: set[str] = field(default_factory=set)
    #: its first module forward with grad on, inference or not (a helper that
    #: an eval function calls: `validate` -> `run_batch(model, x)`)
    any_forward: tuple[cst.Call, str] | None = None
    #: the class the forwarded model was built from, where its binding shows it
    forward_class: str | None = None
    #: its name says inference (`evaluate`, `predict`): worked out on first use
    inference_named: bool | None = None


class GradInInference(Rule):
    """A forward pass in inference code (after `model.eval()`, or in a function
    named like `evaluate`/`validate`/`predict`/`generate`) with no `torch.no_grad()`
    or `torch.inference_mode()` in force: autograd keeps every activation the
    forward needs for a backward that never comes, so peak memory is that of a
    training step, and outputs kept for metrics hold their whole graphs.

    Left alone: functions that call `backward()` or `torch.autograd.grad`
    (Grad-CAM, adversarial examples), functions whose every call in this module
    already runs under no_grad, Lightning's `validation_step`/`test_step`/
    `predict_step` (Lightning disables grad itself), and `test_*` functions of
    test files. Reported once per function, on its first such forward call."""

    code = "MEM004"

    VALID = [
        # the input made on the CPU from a vectorizer, reshaped: the model is on the CPU
        "import torch\ndef predict_rating(review, classifier, vectorizer):\n"
        "    classifier.eval()\n    x = torch.tensor(vectorizer.vectorize(review))\n"
        "    return classifier(x.view(1, -1)).item()",
        "import torch\ndef evaluate(model, x):\n    model.eval()\n    with torch.no_grad():\n"
        "        return model(x)",
        "import torch\n@torch.no_grad()\ndef evaluate(model, x):\n    return model(x)",
        "import torch\n@torch.inference_mode()\ndef predict(self, x):\n    return self.model(x)",
        "import torch\ndef validate(model, x):\n"
        "    torch.set_grad_enabled(False)\n    return model(x)",
        # no_grad opened before model.eval()
        "import torch\ndef run(model, x):\n    with torch.no_grad():\n        model.eval()\n"
        "        out = model(x)\n    return out",
        # Grad-CAM wants the gradient
        "import torch\ndef saliency(model, x):\n    model.eval()\n    out = model(x)\n"
        "    out.max().backward()\n    return x.grad",
        # every caller already disabled grad
        "import torch\ndef infer_batch(model, x):\n    return model(x)\n"
        "def main(model, xs):\n    with torch.no_grad():\n"
        "        return [infer_batch(model, x) for x in xs]",
        # a Lightning-style module (it has training_step) from a project base class
        "import torch\nclass Lit(BaseModule):\n    def training_step(self, batch, idx):\n"
        "        return self.model(batch).mean()\n    def test_step(self, batch, idx):\n"
        "        return self.model(batch)",
        # Lightning disables grad in validation_step itself
        "import torch\nimport pytorch_lightning as pl\nclass Lit(pl.LightningModule):\n"
        "    def validation_step(self, batch, idx):\n        return self.model(batch)",
        # training back to train mode before the forward
        "import torch\ndef epoch(model, x, opt):\n    model.eval()\n    model.train()\n"
        "    loss = model(x).sum()\n    step(loss)",
        # not a module: a metric function named like one
        "import torch\ndef evaluate(preds, labels):\n    return metric(preds, labels)",
        # shapes found in real code (d2l, ultralytics, recbole, SAM):
        # MXNet records no graph outside autograd.record()
        "from mxnet import autograd, gluon\ndef evaluate_loss(net, data):\n"
        "    return [net(x) for x in data]",
        # a method about a model, not a model
        "import torch\ndef predict(self, source):\n"
        "    self.predictor.setup_model(model=self.model)",
        # a project's own wrapper around inference_mode
        "import torch\nfrom .utils import smart_inference_mode\n@smart_inference_mode()\n"
        "def run(model, x):\n    model.eval()\n    return model(x)",
        # a model's own predict API: its caller (another file) picks the grad mode
        "import torch\nclass FM(ContextRecommender):\n    def forward(self, x):\n"
        "        return self.encoder(x)\n    def predict(self, x):\n"
        "        return self.encoder(x).sigmoid()",
        # an inference-named building block that forward calls
        "import torch\nclass Decoder(torch.nn.Module):\n    def forward(self, x):\n"
        "        return self.predict_masks(x)\n    def predict_masks(self, x):\n"
        "        return self.output_upscaling(x)",
        # a wrapper that guards its own predict path
        "import torch\nfrom ultralytics import YOLO\ndef image_inference(path):\n"
        "    model = YOLO('yolo11n.pt')\n    return model(path)",
        # shapes from pytorch-ignite's sources and tests:
        # a default-argument lambda runs where it is called (there, under no_grad)
        "import torch\ndef supervised_evaluation_step(model, model_fn=lambda m, x: m(x)):\n"
        "    return model_fn",
        # a function of this module named like a model, defined below its caller
        "import torch\ndef evaluate(model, x):\n    return _unwrap_model(model).weight\n"
        "def _unwrap_model(model):\n    return model.module",
        # calling a class builds a module
        "import torch\ndef validate_shapes():\n    return DummyModel().to('cuda')",
        # a model file's CPU smoke test: built here, never moved to a GPU
        "import torch\ndef test():\n    net = ResNet18()\n    y = net(torch.randn(2, 3, 32, 32))\n"
        "    print(y.size())\nif __name__ == '__main__':\n    test()",
        # a loss object, not a model
        "import torch\ndef evaluate(model, x, y):\n"
        "    with torch.no_grad():\n        out = model(x)\n"
        "    criterion = torch.nn.CrossEntropyLoss()\n"
        "    criterion.eval()\n    return criterion(out, y)",
        "import torch\ndef validate(self, out, y):\n    return self.loss_fn(out.cuda(), y)",
        # not a PyTorch module: an OpenVINO model records no graph
        "import torch\nimport openvino as ov\ndef infer(path, x):\n"
        "    model = ov.Core().compile_model(path, 'GPU')\n    return model(x)",
        # the CPU branch of an `if` on the GPU
        "import torch\ndef evaluate(model, x, use_gpu):\n    model.eval()\n    if use_gpu:\n"
        "        with torch.no_grad():\n            return model(x.cuda())\n    else:\n"
        "        return model(x)",
        # volatile on training targets, in a function that back-propagates
        "import torch\nfrom torch.autograd import Variable\ndef train(net, x, y, opt):\n"
        "    y = Variable(y.cuda(), volatile=True)\n    loss = crit(net(x.cuda()), y)\n"
        "    loss.backward()",
        # a tokenizer, not a model
        "import torch\nfrom transformers import AutoTokenizer\ndef predict(text):\n"
        "    tokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')\n"
        "    return tokenizer(text, return_tensors='pt').to('cuda')",
        # a smoke test that rebinds the model to its eval() result
        "import torch\nif __name__ == '__main__':\n    layer = AbstractLayer(8, 4)\n"
        "    layer = layer.eval()\n    print(layer(torch.randn(2, 8)))",
        # a smoke test of a class named with digits and an underscore
        "import torch\ndef test():\n    net = MobileNetV3_Small()\n"
        "    return net(torch.randn(2, 3, 224, 224))",
        # a model file's smoke test through a factory of the same file
        "import torch\ndef densenet_cifar():\n    return DenseNet(growth_rate=12)\n"
        "def test():\n    net = densenet_cifar()\n    return net(torch.randn(1, 3, 32, 32))",
        # a method called through a local alias named like a module
        "import torch\ndef predict(self, logits):\n    decoder = self.char_decode\n"
        "    return decoder(logits.argmax(-1))",
    ]
    INVALID = [
        # the twin: the reshaped input is moved to the GPU, so the model is there
        "import torch\ndef predict_rating(review, classifier, vectorizer):\n"
        "    classifier.eval()\n    x = torch.tensor(vectorizer.vectorize(review))\n"
        "    return classifier(x.view(1, -1).cuda()).item()",
        "import torch\ndef evaluate(model, loader):\n    model.eval()\n"
        "    for x, y in loader:\n        out = model(x.cuda())",
        "import torch\ndef run_validation(self, x):\n    return self.model(x.to('cuda'))",
        "import torch\ndef predict(net, x):\n    return net(x.to('cuda:0')).argmax(1)",
        "import torch\nclf = torch.nn.Linear(4, 2).cuda()\nclf.eval()\n"
        "preds = clf(torch.ones(1, 4, device='cuda'))",
        "import torch\nfrom torch.autograd import Variable\n"
        "def test(model, x):\n    x = Variable(x, volatile=True)",
        "import torch\ndef sample_images(G, z):\n    G.eval()\n    return G(z.cuda())",
        "import torch\nimport torchvision\ndef export_preds(x):\n"
        "    backbone = torchvision.models.resnet18().to('cuda')\n    backbone.eval()\n"
        "    return backbone(x)",
        "import torch\ndef eval_epoch(encoder, x):\n    return encoder.forward(x.cuda())",
        # volatile target values fed to the model in a training step (DQN):
        # the forward is recorded and gradients leak into the target
        "import torch\nfrom torch.autograd import Variable\ndef optimize_model(model, s, opt):\n"
        "    nxt = Variable(s.cuda(), volatile=True)\n    target = model(nxt).max(1)[0]\n"
        "    loss = (model(s.cuda()) - target).pow(2).mean()\n    loss.backward()",
        # a GAN's generator by its capital letter
        "import torch\ndef get_sample_image(G, n_noise):\n"
        "    z = torch.randn(100, n_noise).cuda()\n"
        "    return G(z).cpu().numpy()",
        # a caller that does not disable grad
        "import torch\ndef infer_batch(model, x):\n    return model(x)\n"
        "def main(model, xs):\n    return [infer_batch(model, x.cuda()) for x in xs]",
        # a model built here, then moved to the GPU
        "import torch\ndef test():\n    net = ResNet18()\n    net.cuda()\n    net.eval()\n"
        "    return net(torch.randn(2, 3, 32, 32).cuda())",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.index = ModuleIndex.of(ctx)
        self.units = [_Unit(None, None)]  # the module's top level
        self.pending: list[_Unit] = []
        self.grad_users: set[cst.CSTNode] = set()  # functions that call backward() & co.
        self.volatile_units: list[_Unit] = []
        #: names anything calls `.to()`, `.cuda()` or `.cpu()` on, anywhere in the file
        self.placed: set[str] = set()
        self.finished: dict[cst.CSTNode, _Unit] = {}  # every function's unit, by its node
        self.module_scope: Scope | None = None  # the file's top-level bindings, for finish()
        self.module: cst.Module | None = None
        self._flows: BackwardFlows | None = None

    @property
    def unit(self) -> _Unit:
        return self.units[-1]

    def visit_Module(self, node: cst.Module) -> None:
        self.module_scope = self.ctx.scope
        self.module = node

    def flows(self) -> BackwardFlows:
        """How values reach a backward in this module, built once, on first need."""
        if self._flows is None:
            assert self.module is not None  # set by visit_Module, before any finding
            self._flows = BackwardFlows(self.module, self.ctx.names, set())
        return self._flows

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        unit = _Unit(node, self.index.current_class)
        scopes = self.ctx.scopes
        if len(scopes) > 1 and type(scopes[-2].node) is cst.FunctionDef:
            # a closure runs the models of the function it is defined in, in
            # the mode they are in there (`inception.eval()`, then `get_pred`)
            outer = self.units[-1]
            unit.evaluated, unit.eval_calls = dict(outer.evaluated), dict(outer.eval_calls)
        self.units.append(unit)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        unit = self.units.pop()
        self.finished[node] = unit
        if unit.wants_grad:
            self.grad_users.add(node)
        if unit.forward is not None and (not unit.wants_grad or _evaluates_after_training(unit)):
            self.pending.append(unit)
        if unit.volatile is not None and node.name.value != "__init__":
            self.volatile_units.append(unit)

    def visit_Assign(self, node: cst.Assign) -> None:
        targets = [dotted_name(t.target) or "" for t in node.targets]
        if self.unit.frozen:  # `model.fc = nn.Linear(...)` after freezing: a new, trainable part
            self.unit.frozen -= {name.rsplit(".", 1)[0] for name in targets if "." in name}
        if not any(name.endswith(".requires_grad") for name in targets):
            return
        if literal_bool(node.value) is False:
            # `for v in model.parameters(): v.requires_grad = False`: a frozen
            # model's forward on an input without grad records nothing
            frozen = self._parameters_looped_over()
            if frozen is not None:
                self.unit.frozen.add(frozen)
            return
        # `x.requires_grad = True`: gradients with respect to the input (attacks, saliency)
        self.unit.wants_grad = True
        self.unit.grad_after_forward |= self.unit.forward is not None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        qualified = self.ctx.qualify(func)
        if method in _GRAD_METHODS or qualified in GRAD_USERS:
            self.unit.wants_grad = True
            self.unit.grad_after_forward |= self.unit.forward is not None
            return
        if qualified in VARIABLE:
            if _is_volatile(node) and not self.index.grad_disabled and not self.ctx.in_cpu_branch():
                after_eval = any(self.unit.evaluated.values())
                # the first one, or the first after `.eval()` in a function that also trains
                if self.unit.volatile is None or (after_eval and not self.unit.volatile_after_eval):
                    self.unit.volatile = (node, self.statement())
                    self.unit.volatile_after_eval = after_eval
                parent = self.ctx.parent
                if isinstance(parent, cst.Assign):
                    self.unit.volatile_names.update(
                        n for t in parent.targets for n in [dotted_name(t.target)] if n)
                if self._feeds_a_model():
                    self.unit.volatile_fed = True
            return
        if method in ("eval", "train") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name and method == "train" and not _is_false(node):
                self._close_top_level_inference(name)
            if name:
                self.unit.evaluated[name] = method == "eval" or _is_false(node)
                if self.unit.evaluated[name]:
                    self.unit.eval_calls[name] = node
            return
        if method in ("cuda", "to", "cpu") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name:
                self.unit.on_gpu[name] = moves_to_cuda(node, self.ctx)
                self.placed.add(name)
        if self.unit.volatile_names and not self.unit.volatile_fed and any(
                dotted_name(a.value) in self.unit.volatile_names for a in node.args) \
                and self._called_module(node) is not None:
            self.unit.volatile_fed = True
        if self.unit.forward is not None or self.index.grad_disabled:
            return
        if self.unit.any_forward is not None and not self.unit.evaluated \
                and not self._inference_named():
            return  # nothing left to learn here: its first forward is known, none can be inference
        module = self._called_module(node)
        if module is None or self._in_signature() or self._built_here_on_cpu(module) \
                or self.ctx.in_cpu_branch() or self._fed_host_tensor(node):
            return
        if self.unit.any_forward is None:
            self.unit.any_forward = (node, module)
        if self.unit.evaluated.get(module) or self._inference_named():
            self.unit.forward = (node, self.statement(), module)
            self.unit.forward_after_eval = bool(self.unit.evaluated.get(module))
            self.unit.forward_class = self._built_from(module)
            if self.unit.node is None:
                # at the top level only a backward that follows counts (a script
                # that trains, then predicts)
                self.unit.wants_grad = False
                self.pending.append(self.unit)

    def _inference_named(self) -> bool:
        unit = self.unit
        if unit.inference_named is None:
            unit.inference_named = isinstance(unit.node, cst.FunctionDef) \
                and _is_inference_name(unit.node)
        return unit.inference_named

    def _parameters_looped_over(self) -> str | None:
        """`model` when inside `for v in model.parameters():` (or
        `named_parameters()`): the loop goes over every parameter of it."""
        for ancestor in reversed(self.ctx.ancestors):
            if isinstance(ancestor, cst.For):
                call = ancestor.iter
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
                        and call.func.attr.value in ("parameters", "named_parameters"):
                    return dotted_name(call.func.value)
                return None
        return None

    def _built_from(self, module: str) -> str | None:
        """`DiffVC` for a model bound to `DiffVC(params).cuda()`."""
        site = self.ctx.binding_site(module)
        built, _ = self._where_built(module, site.value if site is not None else None, site)
        if not isinstance(built, cst.Call):
            return None
        name = (dotted_name(built.func) or "").rsplit(".", 1)[-1]
        return name if _CLASS_NAME.fullmatch(name) else None

    def _where_built(self, module: str, value: cst.BaseExpression | None,
                     site: BindingSite | None) -> tuple[cst.BaseExpression | None, bool]:
        """Back from `module`'s binding (`value`, at `site`) to the expression
        that built it, through `net = net.eval()`, `net = Net().cuda()` and
        `model = nn.DataParallel(model)` (which moves nothing); and whether a
        move to a CUDA device was on the way."""
        moved = False
        for _ in range(4):
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value in CHAINED:
                moved = moved or moves_to_cuda(value, self.ctx)
                value = value.func.value
            if isinstance(value, cst.Call) and value.args \
                    and (dotted_name(value.func) or "").endswith("DataParallel"):
                value = value.args[0].value  # the model it wraps
                continue
            if dotted_name(value) != module or site is None or site.previous is None:
                break
            site = site.previous
            value = site.value
        return value, moved

    def _close_top_level_inference(self, module: str) -> None:
        """`cnn.train()` at a script's top level after an unguarded eval
        forward of `cnn`: that inference phase is over, and a backward from
        here on trains (a notebook that alternates training and evaluation
        cells). The phase keeps its finding; the next one starts afresh."""
        unit = self.unit
        if unit.node is not None or unit.forward is None or unit.wants_grad \
                or unit.forward[2] != module:
            return
        self.units[-1] = replace(unit, forward=None, evaluated=dict(unit.evaluated),
                                 eval_calls=dict(unit.eval_calls), on_gpu=dict(unit.on_gpu),
                                 volatile=None, volatile_names=set(), any_forward=None)

    def _feeds_a_model(self) -> bool:
        """The volatile Variable being built is an argument of a model's call
        (`model(Variable(s, volatile=True).type(FloatTensor))`)."""
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Call) and self._called_module(ancestor) is not None:
                return True
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return False
        return False

    def _report_volatile(self, node: cst.Call, statement: cst.CSTNode | None) -> None:
        """One finding per function, where its first `volatile=True` is; a
        function whose unguarded forward is reported is reported there instead."""
        self.report(node, "Variable(..., volatile=True) has done nothing since PyTorch 0.4: "
                          "autograd still records the forward and keeps its activations; "
                          "wrap the inference in `with torch.no_grad():` and drop Variable",
                    statement, UnlessProjectOnCpu.here(self.ctx))

    def _called_module(self, call: cst.Call) -> str | None:
        """The name of the module this call runs forward, if it is one."""
        target = call.func
        if isinstance(target, cst.Attribute) and target.attr.value == "forward":
            target = target.value
        name = dotted_name(target)
        if name is None or self.ctx.qualify(target) is not None:
            return None  # `F.relu(x)`, `torch.sigmoid(x)`: library functions
        bound = self.ctx.binding(name)
        if is_loss_name(name) or (bound is not None
                                  and constructed_kind(bound, self.ctx) in ("loss", "other")):
            return None  # `criterion(out, y)`: a loss; `core.compile_model(...)`: not PyTorch
        if self.unit.evaluated.get(name):
            return name
        if bound is not None:
            verdict = self._constructs_module(bound)
            if verdict is not None:
                return name if verdict else None
        # `decoder = self.char_decode`, `net = linreg`: an alias is judged by what it names
        judged = dotted_name(bound) if isinstance(bound, (cst.Attribute, cst.Name)) else None
        judged = judged or name
        if (_CLASS_NAME.fullmatch(judged.rsplit(".", 1)[-1])
                or self._names_function(judged, self.unit.class_name)):
            return None
        written = judged.rsplit(".", 1)[-1]
        last = written.lower()
        if last.split("_", 1)[0] in _VERB_PREFIXES:
            return None
        # `G(z)`, `D(x)`: a GAN's generator and discriminator, by the capital letter
        return name if _MODEL_NAMES.fullmatch(last) or written in ("G", "D") else None

    def _built_here_on_cpu(self, module: str) -> bool:
        """A model built in this function (or at the top level) and never moved
        to a GPU before its forward: a model file's CPU smoke test
        (`net = ResNet18(); y = net(torch.randn(2, 3, 32, 32))`) or a CPU
        script, not inference on a GPU."""
        scope = next((s for s in reversed(self.ctx.scopes) if module in s.bindings), None)
        if scope is None or (scope is not self.ctx.scope and (  # a closure's: its function's
                type(scope.node) is not cst.FunctionDef or module in self.placed)):
            return False  # a parameter, an attribute, a global: placed elsewhere
        if self.unit.on_gpu.get(module):
            return False
        value, moved = self._where_built(module, scope.bindings[module], scope.sites.get(module))
        if moved or not isinstance(value, cst.Call) or call_arg(value, "device") is not None \
                or creates_on_cuda(value, self.ctx):
            return False
        built = dotted_name(value.func) or ""
        return (_CLASS_NAME.fullmatch(built.rsplit(".", 1)[-1]) is not None
                or built in self.index.functions_by_name  # `net = densenet_cifar()`, defined here
                or constructed_kind(value, self.ctx) == "module")

    def _global_on_host(self, module: str) -> bool:
        """A model bound once at the file's top level, by building it
        (`detection = maskrcnn_resnet50_fpn(pretrained=True)`), that nothing in
        the file moves (`.to()`, `.cuda()`), wraps or hands to any call: it
        stays on the CPU, wherever the file runs its forward. A notebook's
        CPU demo, not inference on a GPU."""
        scope = self.module_scope
        if scope is None or "." in module or module in self.placed:
            return False
        site = scope.sites.get(module)
        if site is None or site.previous is not None or site.unpacked_from is not None:
            return False
        value = site.value
        chain = value
        while isinstance(chain, cst.Call) and isinstance(chain.func, cst.Attribute) \
                and chain.func.attr.value in CHAINED:
            if chain.func.attr.value in ("to", "cuda"):
                return False
            chain = chain.func.value
        if not isinstance(chain, cst.Call) or call_arg(chain, "device") is not None \
                or "DataParallel" in (dotted_name(chain.func) or "") \
                or built_kind(chain, self.ctx) != "module":
            return False
        return not any(isinstance(expr, cst.Name) and expr.value == module
                       for expr, _ in self.index.escaped)

    def _names_function(self, name: str, class_name: str | None) -> bool:
        """`_assert_model(...)`, `random_data_generator(...)`: a function of this
        module (or a method of this class, through `self.`) named like a model."""
        head, _, attr = name.partition(".")
        if not attr:
            return name in self.index.functions_by_name
        return (head == "self" and "." not in attr and class_name is not None
                and bool(self.index.methods_named(class_name, attr)))

    def _fed_host_tensor(self, call: cst.Call) -> bool:
        """`data = torch.randn(2, 3, 32, 32)` then `model(data)`: the input made
        here on the CPU and never moved. A model on a GPU would refuse it, so
        this forward runs on the CPU (a shape probe before `.cuda()`). Only
        the first argument counts: lengths for `pack_padded_sequence` are
        meant to stay on the CPU next to a CUDA input."""
        first = next((a.value for a in call.args if a.keyword is None and not a.star), None)
        for _ in range(8):  # `x = torch.tensor(v)`, then `model(x.view(1, -1))`
            if isinstance(first, cst.Name):
                site = self.ctx.binding_site(first.value)
                first = site.value if site is not None and site.unpacked_from is None else None
            elif isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) \
                    and first.func.attr.value in _SAME_DEVICE_METHODS:
                first = first.func.value
            else:
                break
        return isinstance(first, cst.Call) and self._made_on_host(first)

    def _made_on_host(self, call: cst.Call) -> bool:
        """`torch.randn(...)`, `torch.FloatTensor(1, 3, 8, 8)`: a new tensor with
        no device, in a file whose default device is not set to CUDA."""
        qualified = self.ctx.qualify(call.func) or ""
        return qualified in HOST_FACTORIES and call_arg(call, "device") is None

    def _in_signature(self) -> bool:
        """A call in a parameter's default (`model_fn=lambda m, x: m(x)`) runs
        where the lambda is called, not in the function being defined."""
        for ancestor in reversed(self.ctx.ancestors):
            if isinstance(ancestor, cst.Parameters):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.IndentedBlock)):
                return False
        return False

    def _constructs_module(self, value: cst.BaseExpression) -> bool | None:
        """True for `nn.Linear(...)`, `Net().to(device)`, `resnet18()`,
        `AutoModel.from_pretrained(...)`; False for literals, lambdas and
        functions; None when it cannot tell."""
        kind = constructed_kind(value, self.ctx)
        if kind is not None:
            return kind == "module"
        value = unchained(value)
        if isinstance(value, (cst.BaseString, cst.Integer, cst.Float, cst.Lambda, cst.List,
                              cst.Dict, cst.Tuple, cst.BaseComp)):
            return False
        if not isinstance(value, cst.Call):
            return None
        qualified = self.ctx.qualify(value.func) or ""
        if qualified.startswith(_SELF_GUARDED):
            return False
        if qualified.startswith(_MODULE_FACTORIES):
            return True
        if isinstance(value.func, cst.Attribute) and value.func.attr.value == "from_pretrained":
            return True
        if isinstance(value.func, cst.Name) and self.index.local_class(value.func) is not None:
            return self._is_module_class(value.func.value)
        return None

    def _is_module_class(self, class_name: str) -> bool | None:
        """True for a local subclass of nn.Module; None when its bases are not known here."""
        for info in self.index.lineage(class_name):
            for base in info.bases:
                qualified = self.ctx.names.qualify(base) or ""
                if qualified.startswith(("torch.nn.", "transformers.")):
                    return True
        return None

    # -- after the walk ---------------------------------------------------
    def finish(self) -> None:
        if not any(self.ctx.names.imports(root) for root in _TORCH_ROOTS):
            return  # mxnet / TensorFlow / JAX code records no graph outside its tapes
        reported: set[int] = set()
        for unit in self.pending:
            assert unit.forward is not None  # what made the unit pending
            call, statement, module = unit.forward
            if (unit.wants_grad and not _evaluates_after_training(unit)) \
                    or module in unit.frozen \
                    or self._left_alone(unit, module) \
                    or self._global_on_host(module):
                continue
            if self.index.forward_disables_grad(unit.forward_class):
                continue
            reported.add(id(unit))
            info = self.index.info(unit.node) if unit.node is not None else None
            unless = self._unless(info)
            if unit.forward_class is not None and unit.forward_class not in self.index.classes:
                # a class of another file, whose forward may disable grad itself
                unless = Either((unless, UnlessForwardDisablesGrad(unit.forward_class)))
            if unit.node is None:
                where = f"after {module}.eval()"
            elif unit.forward_after_eval:
                where = f"after {module}.eval() in '{unit.node.name.value}'"
            else:
                where = f"in '{unit.node.name.value}'"
            self.report(call, f"'{module}' runs forward {where} with autograd on: it saves every "
                              "activation for a backward that never comes (training-step peak "
                              "memory, outputs that hold their graphs); wrap the inference in "
                              "`with torch.no_grad():` or decorate the function with "
                              "@torch.no_grad()" + _VOLATILE_TOO * (unit.volatile is not None),
                        statement, unless, fix=self._decorate(unit.node),
                        related=[(unit.eval_calls[module], f"'{module}' is put in eval mode here")]
                        if unit.forward_after_eval and module in unit.eval_calls else [])

        self._report_inference_through_helpers()
        top = self.units[0]
        for unit in (*self.volatile_units, *([top] if top.volatile is not None else [])):
            if unit.volatile is not None and id(unit) not in reported and (
                    not unit.wants_grad or unit.volatile_after_eval or unit.volatile_fed):
                self._report_volatile(*unit.volatile)

    def _decorate(self, function: cst.FunctionDef | None) -> FixPlan | None:
        """`@torch.no_grad()` right above the `def`. Unsafe: the function might
        want gradients somewhere memlint did not see (a caller back-propagating
        through what it returns). None at a script's top level (no function
        to decorate), for `async def` (the decorator would not cover the
        coroutine's body), and where `torch` is not imported as `torch`."""
        if function is None or function.asynchronous is not None \
                or self.ctx.names.qualify_name("torch") != "torch":
            return None
        return FixPlan(UNSAFE, f"decorate '{function.name.value}' with @torch.no_grad()",
                       insertions=((function, "@torch.no_grad()"),))

    def _unless(self, info: FunctionInfo | None) -> Condition:
        """What the rest of the project may show: a CPU project, callers in
        other files that all disable grad, or that call a method only to train."""
        unless: Condition = UnlessProjectOnCpu.here(self.ctx)
        if info is not None and info.class_name is None and not self.index.call_sites(info):
            # called from other files only, perhaps all under no_grad
            unless = Either((unless, UnlessCallersDisableGrad(
                self.facts.module, info.name)))
        elif info is not None and not self.index.call_sites(info):
            # a method called from other files, perhaps only by training steps
            unless = Either((unless, UnlessCalledToTrain(
                self.facts.module, info.name)))
        return unless

    def _report_inference_through_helpers(self) -> None:
        """An eval function whose forward runs in a helper of this file
        (`validate` puts the model in eval mode, then `run_batch(model, x)`
        runs it): reported at the call, where `with torch.no_grad():` goes."""
        for unit in self.finished.values():
            if unit.node is None or unit.forward is not None or unit.wants_grad \
                    or unit.class_name is not None \
                    or not (any(unit.evaluated.values()) or _is_inference_name(unit.node)):
                continue  # (None: the top level, never among the finished units)
            name = unit.node.name.value
            info = self.index.info(unit.node)
            if info is None or self.index.grad_disabled_by_callers(info) or (
                    name.lstrip("_").startswith("test") and self.ctx.in_test_file):
                continue
            for site in info.calls:
                helper = next((self.finished[c.node] for c in self.index.callees(site)
                               if c.node in self.finished), None)
                if site.grad_disabled or helper is None or helper.node is None \
                        or helper.any_forward is None or helper.wants_grad \
                        or helper.forward is not None or _is_inference_name(helper.node):
                    continue
                forward, module = helper.any_forward
                called = helper.node.name.value
                self.report(site.node, f"'{name}' runs inference through '{called}' with "
                                       f"autograd on: '{module}' runs forward there and saves "
                                       "every activation for a backward that never comes; wrap "
                                       f"the call in `with torch.no_grad():` or decorate "
                                       f"'{name}' with @torch.no_grad()",
                            None, self._unless(info), fix=self._decorate(unit.node),
                            related=[(forward, f"'{module}' runs forward here, in '{called}'")])
                break

    def _left_alone(self, unit: _Unit, module: str) -> bool:
        """Whether `unit`'s unguarded forward of `module` is no inference to report."""
        if unit.node is None:
            return False
        name = unit.node.name.value
        if name.lstrip("_").startswith("test") and self.ctx.in_test_file:
            return True  # `test_*` and its `_test_*` helpers: "test" is pytest's word here
        if self._names_function(module, unit.class_name):
            return True  # a function defined further down the file, named like a model
        if unit.class_name and _LIGHTNING_HOOK.fullmatch(name) \
                and self._is_lightning(unit.class_name):
            return True
        if unit.class_name and self.index.init_turns_grad_off(unit.class_name):
            return True
        info = self.index.info(unit.node)
        if info is None:
            return False
        if not unit.forward_after_eval and (
                self._part_of_training(info) or self._is_model_method(unit)):
            return True
        return self.index.grad_disabled_by_callers(info)

    def _is_model_method(self, unit: _Unit) -> bool:
        """`predict` / `full_sort_predict` of a model class: the model's own API,
        whose caller (an evaluation loop, often in another file) picks the grad mode."""
        if unit.class_name is None:
            return False
        for info in self.index.lineage(unit.class_name):
            if "forward" in info.methods or self._is_module_class(info.name):
                return True
            for base in info.bases:
                name = dotted_name(base) or ""
                if name.endswith(_MODEL_BASE_SUFFIXES) and name not in self.index.classes:
                    return True  # a project's model base class from another file (`QueBaseModel`)
            if self._builds_its_layers(info):
                return True
        return False

    def _builds_its_layers(self, info: ClassInfo) -> bool:
        """A class whose `__init__` builds modules onto `self` (`self.mlp =
        DNN(...).to(self.device)`, `self.fc = nn.Linear(...)`) and none of whose
        methods back-propagates is a model, whatever its base (RecBole's
        `DiffRec(GeneralRecommender)`, the base in another file); a trainer
        that builds its model also runs the backward."""
        init = info.methods.get("__init__")
        if init is None or any(m.node in self.grad_users for m in info.methods.values()):
            return False
        pending: list[cst.CSTNode] = [init.node.body]
        while pending:
            node = pending.pop()
            if type(node) is cst.Assign and any(
                    (dotted_name(t.target) or "").startswith("self.") for t in node.targets):
                built = unchained(node.value)
                if isinstance(built, cst.Call) and (
                        constructed_kind(built, self.ctx) == "module"
                        or self._is_module_class(dotted_name(built.func) or "")):
                    return True
            elif not isinstance(node, cst.BaseExpression):
                pending.extend(node.children)
        return False

    def _part_of_training(self, info: FunctionInfo) -> bool:
        """A function whose result a caller here back-propagates, or that a
        module's `forward` calls, is a building block of training, whatever
        its name (`inference` run in a training step); one a training step
        merely calls (`validate()` each epoch) is not."""
        for site in self.index.call_sites(info):
            caller = site.caller
            if caller is not None and not site.grad_disabled \
                    and caller.name in ("forward", "__call__"):
                return True
        return self.flows().result_backpropagated(info.node)

    def _is_lightning(self, class_name: str) -> bool:
        for info in self.index.lineage(class_name):
            if "training_step" in info.methods:
                return True
            for base in info.bases:
                name = self.ctx.names.qualify(base) or dotted_name(base) or ""
                if name.endswith(_LIGHTNING_BASES):
                    return True
        return False


def _evaluates_after_training(unit: _Unit) -> bool:
    """A function that trains and then evaluates (`model.eval()`, a test loop
    with no backward after it: dgcnn's `train()`): its back-propagation is the
    training phase's, not the evaluation's; Grad-CAM's backward comes after
    its forward."""
    return unit.node is not None and unit.forward_after_eval and not unit.grad_after_forward


def _is_inference_name(node: cst.FunctionDef) -> bool:
    words = set(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", node.name.value).lower().split("_"))
    return bool(words & _INFERENCE_WORDS) and not words & _TRAINING_WORDS


_VOLATILE_TOO = " (its Variable(..., volatile=True) has done nothing since PyTorch 0.4)"


def _is_volatile(call: cst.Call) -> bool:
    volatile = call_arg(call, "volatile")
    return volatile is not None and isinstance(volatile.value, cst.Name) \
        and volatile.value.value == "True"


#: Tensor methods whose result is on the device of the tensor they are called on.
_SAME_DEVICE_METHODS = {"view", "unsqueeze", "squeeze", "reshape", "float", "long", "int",
                        "double", "half", "t", "transpose", "permute", "contiguous",
                        "flatten", "expand", "view_as"}


def _is_false(call: cst.Call) -> bool:
    """`model.train(False)` puts the model in eval mode."""
    return bool(call.args) and literal_bool(call.args[0].value) is False
