"""Forward passes in inference code with autograd still recording."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.autograd_values import BackwardFlows
from memlint.analysis.context import Context
from memlint.analysis.devices import moves_to_cuda
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import dotted_name, literal_bool
from memlint.analysis.project import (Either, UnlessForwardDisablesGrad, UnlessForwardNeedsGrad,
                                      UnlessProjectOnCpu)
from memlint.analysis.torch_api import GRAD_USERS, VARIABLE
from memlint.rules.base import Rule, RuleOptions
from memlint.rules.mem004_grad_in_inference.forwards import (VOLATILE_TOO, Forwards, Unit,
                                                             is_false, is_volatile)
from memlint.rules.mem004_grad_in_inference.phases import (
    GRAD_METHODS, LIGHTNING_HOOK, TORCH_ROOTS, after_train_call, evaluates_after_training,
    inference_through_helpers, is_inference_name, no_grad_fix, part_of_training,
    unless_elsewhere)


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
        self.units = [Unit(None, None)]  # the module's top level
        self.pending: list[Unit] = []
        self.grad_users: set[cst.CSTNode] = set()  # functions that call backward() & co.
        self.volatile_units: list[Unit] = []
        self.forwards = Forwards(ctx, self.index)
        self.finished: dict[cst.CSTNode, Unit] = {}  # every function's unit, by its node
        self.module: cst.Module | None = None
        self._flows: BackwardFlows | None = None

    @property
    def unit(self) -> Unit:
        return self.units[-1]

    def visit_Module(self, node: cst.Module) -> None:
        self.forwards.module_scope = self.ctx.scope
        self.module = node

    def flows(self) -> BackwardFlows:
        """How values reach a backward in this module, built once, on first need."""
        if self._flows is None:
            assert self.module is not None  # set by visit_Module, before any finding
            self._flows = BackwardFlows(self.module, self.ctx.names, set())
        return self._flows

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        unit = Unit(node, self.index.current_class)
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
        if unit.forward is not None and (not unit.wants_grad or evaluates_after_training(unit)):
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
            frozen = self.forwards.parameters_looped_over()
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
        if method == "requires_grad_" and is_false(node):  # frozen: its forward records nothing
            self.unit.frozen.update(filter(None, [self.forwards.frozen_by(node)]))
            return
        if method in GRAD_METHODS or qualified in GRAD_USERS:
            self.unit.wants_grad = True
            self.unit.grad_after_forward |= self.unit.forward is not None
            return
        if qualified in VARIABLE:
            if is_volatile(node) and not self.index.grad_disabled and not self.ctx.in_cpu_branch():
                after_eval = any(self.unit.evaluated.values())
                # the first one, or the first after `.eval()` in a function that also trains
                if self.unit.volatile is None or (after_eval and not self.unit.volatile_after_eval):
                    self.unit.volatile = (node, self.statement())
                    self.unit.volatile_after_eval = after_eval
                parent = self.ctx.parent
                if isinstance(parent, cst.Assign):
                    self.unit.volatile_names.update(
                        n for t in parent.targets for n in [dotted_name(t.target)] if n)
                if self.forwards.feeds_a_model(self.unit):
                    self.unit.volatile_fed = True
            return
        if method in ("eval", "train") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name and method == "train" and not is_false(node):
                self.units[-1] = after_train_call(self.unit, name)
            if name:
                self.unit.evaluated[name] = method == "eval" or is_false(node)
                if self.unit.evaluated[name]:
                    self.unit.eval_calls[name] = node
            return
        if method in ("cuda", "to", "cpu") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name:
                self.unit.on_gpu[name] = moves_to_cuda(node, self.ctx)
                self.forwards.placed.add(name)
        if self.unit.volatile_names and not self.unit.volatile_fed and any(
                dotted_name(a.value) in self.unit.volatile_names for a in node.args) \
                and self.forwards.called_module(node, self.unit) is not None:
            self.unit.volatile_fed = True
        if self.unit.forward is not None or self.index.grad_disabled:
            return
        if self.unit.any_forward is not None and not self.unit.evaluated \
                and not self._inference_named():
            return  # nothing left to learn here: its first forward is known, none can be inference
        module = self.forwards.called_module(node, self.unit)
        forwards = self.forwards
        if module is None or forwards.in_signature() \
                or forwards.built_here_on_cpu(module, self.unit) \
                or self.ctx.in_cpu_branch() or forwards.fed_host_tensor(node):
            return
        if self.unit.any_forward is None:
            self.unit.any_forward = (node, module)
        if self.unit.evaluated.get(module) or self._inference_named():
            self.unit.forward = (node, self.statement(), module)
            self.unit.forward_after_eval = bool(self.unit.evaluated.get(module))
            self.unit.forward_class = self.forwards.built_from(module)
            if self.unit.node is None:
                # at the top level only a backward that follows counts (a script
                # that trains, then predicts)
                self.unit.wants_grad = False
                self.pending.append(self.unit)

    def _inference_named(self) -> bool:
        unit = self.unit
        if unit.inference_named is None:
            unit.inference_named = isinstance(unit.node, cst.FunctionDef) \
                and is_inference_name(unit.node)
        return unit.inference_named

    def _report_volatile(self, node: cst.Call, statement: cst.CSTNode | None) -> None:
        """One finding per function, where its first `volatile=True` is; a
        function whose unguarded forward is reported is reported there instead."""
        self.report(node, "Variable(..., volatile=True) has done nothing since PyTorch 0.4: "
                          "autograd still records the forward and keeps its activations; "
                          "wrap the inference in `with torch.no_grad():` and drop Variable",
                    statement, UnlessProjectOnCpu.here(self.ctx))

    def finish(self) -> None:
        if not any(self.ctx.names.imports(root) for root in TORCH_ROOTS):
            return  # mxnet / TensorFlow / JAX code records no graph outside its tapes
        reported: set[int] = set()
        for unit in self.pending:
            assert unit.forward is not None  # what made the unit pending
            call, statement, module = unit.forward
            if (unit.wants_grad and not evaluates_after_training(unit)) \
                    or module in unit.frozen \
                    or self._left_alone(unit, module) \
                    or self.forwards.global_on_host(module):
                continue
            if self.index.forward_disables_grad(unit.forward_class):
                continue
            reported.add(id(unit))
            info = self.index.info(unit.node) if unit.node is not None else None
            unless = unless_elsewhere(info, self.index, self.ctx, self.facts.module)
            if unit.forward_class is not None and unit.forward_class not in self.index.classes:
                # a class of another file, whose forward may disable grad itself
                unless = Either((unless, UnlessForwardDisablesGrad(unit.forward_class)))
            unless = Either((unless, UnlessForwardNeedsGrad(self.facts.module, unit.forward_class)))
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
                              "@torch.no_grad()" + VOLATILE_TOO * (unit.volatile is not None),
                        statement, unless, fix=no_grad_fix(unit.node, self.ctx),
                        related=[(unit.eval_calls[module], f"'{module}' is put in eval mode here")]
                        if unit.forward_after_eval and module in unit.eval_calls else [])

        self._report_inference_through_helpers()
        top = self.units[0]
        for unit in (*self.volatile_units, *([top] if top.volatile is not None else [])):
            if unit.volatile is not None and id(unit) not in reported and (
                    not unit.wants_grad or unit.volatile_after_eval or unit.volatile_fed):
                self._report_volatile(*unit.volatile)

    def _report_inference_through_helpers(self) -> None:
        """An eval function whose forward runs in a helper of this file
        (`validate` puts the model in eval mode, then `run_batch(model, x)`
        runs it): reported at the call, where `with torch.no_grad():` goes."""
        for function, info, site, called, forward, module in inference_through_helpers(
                self.finished, self.index, self.ctx):
            name = function.name.value
            self.report(site.node, f"'{name}' runs inference through '{called}' with "
                                   f"autograd on: '{module}' runs forward there and saves "
                                   "every activation for a backward that never comes; wrap "
                                   f"the call in `with torch.no_grad():` or decorate "
                                   f"'{name}' with @torch.no_grad()",
                        None, unless_elsewhere(info, self.index, self.ctx, self.facts.module),
                        fix=no_grad_fix(function, self.ctx),
                        related=[(forward, f"'{module}' runs forward here, in '{called}'")])

    def _left_alone(self, unit: Unit, module: str) -> bool:
        """Whether `unit`'s unguarded forward of `module` is no inference to report."""
        if unit.node is None:
            return False
        name = unit.node.name.value
        if name.lstrip("_").startswith("test") and self.ctx.in_test_file:
            return True  # `test_*` and its `_test_*` helpers: "test" is pytest's word here
        if self.forwards.names_function(module, unit.class_name):
            return True  # a function defined further down the file, named like a model
        if unit.class_name and LIGHTNING_HOOK.fullmatch(name) \
                and self.forwards.is_lightning(unit.class_name):
            return True
        if unit.class_name and self.index.init_turns_grad_off(unit.class_name):
            return True
        info = self.index.info(unit.node)
        if info is None:
            return False
        if not unit.forward_after_eval and (
                part_of_training(info, self.index, self.flows)
                or self.forwards.is_model_method(unit, self.grad_users)):
            return True
        return self.index.grad_disabled_by_callers(info)
