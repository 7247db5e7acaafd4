"""MEM004's examples: code it must leave alone (VALID) and code it must
report (INVALID), each a whole file; the rule's tests and its page read them."""

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
    # a Gluon script that takes torchvision's transforms only
    "import mxnet as mx\nfrom torchvision.transforms import transforms\n"
    "def evaluate(net, val_data, ctx):\n    net.eval()\n"
    "    return [net(x.as_in_context(ctx)) for x in val_data]",
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
    # a model handed to a helper by its only caller, frozen there
    "import torch\nimport copy\ndef _sample(G, z):\n    return G(z.cuda())\n"
    "def compute(opts):\n    G = copy.deepcopy(opts.G).eval().requires_grad_(False).cuda()\n"
    "    return [_sample(G, torch.randn(1, 512)) for _ in range(8)]",
    # a wrapper only handed to the ONNX exporter: it runs once, to be traced
    "import torch\ndef export(model, path):\n    model.eval()\n"
    "    x = torch.randn(1, 16).cuda()\n    def forward_for_export(x):\n"
    "        return model(x)[0]\n    torch.onnx.export(forward_for_export, x, path)",
    # a volatile Variable fed only to forwards under no_grad: it changes nothing
    "import torch\nfrom torch.autograd import Variable\ndef test(model, x):\n"
    "    model.eval()\n    v = Variable(x.cuda(), volatile=True)\n"
    "    with torch.no_grad():\n        return model(v)",
    # a warm-up forward whose output nothing keeps, then the loop under no_grad
    "import torch\ndef evaluate(model, loader):\n    model.eval()\n"
    "    model(torch.zeros(1, 3, 64, 64).cuda())\n    with torch.no_grad():\n"
    "        return [model(x.cuda()) for x in loader]",
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
    # the twin: the helper's caller hands it the model unfrozen
    "import torch\nimport copy\ndef _sample(G, z):\n    return G(z.cuda())\n"
    "def compute(opts):\n    G = copy.deepcopy(opts.G).eval().cuda()\n"
    "    return [_sample(G, torch.randn(1, 512)) for _ in range(8)]",
    # a discarded forward no other forward follows is the work (a profiled run)
    "import torch\nfrom torch.profiler import profile\nmodel.eval()\n"
    "with profile() as prof:\n    model(torch.randn(1, 4, 128, 128, 128).cuda())",
    # the twin: the loop after the warm-up runs with autograd on
    "import torch\ndef evaluate(model, loader):\n    model.eval()\n"
    "    model(torch.zeros(1, 3, 64, 64).cuda())\n"
    "    return [model(x.cuda()) for x in loader]",
    # a forward discarded batch after batch: every batch's graph, one at a time
    "import torch\ndef evaluate(model, loader):\n    model.eval()\n"
    "    for x in loader:\n        model(x.cuda())",
]
