"""Facts that cross files: a finding that depends on the rest of the project
is settled once every file of the checked tree is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint import check_paths, check_source

EVALUATE = ("import torch\n"
            "def evaluate(model, loader):\n"
            "    model.eval()\n"
            "    return [model(x.cuda()) for x, _ in loader]\n")


def codes(tree: Path) -> list[tuple[str, int, str]]:
    report = check_paths([str(tree)], jobs=1)
    return [(Path(f.path).name, f.line, f.code) for f in report.findings]


def test_an_eval_helper_called_under_no_grad_from_another_file_is_left_alone(tmp_path):
    (tmp_path / "utils.py").write_text(EVALUATE)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom utils import evaluate\n"
        "with torch.no_grad():\n    evaluate(model, loader)\n")
    assert codes(tmp_path) == []


def test_the_same_helper_called_with_grad_on_from_another_file_is_reported(tmp_path):
    (tmp_path / "utils.py").write_text(EVALUATE)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom utils import evaluate\n"
        "with torch.no_grad():\n    evaluate(model, loader)\n"
        "for epoch in range(3):\n    evaluate(model, loader)\n")
    assert codes(tmp_path) == [("utils.py", 4, "MEM004")]


#: DHC's `utils`: the sliding-window helper is called by `test_all_case` only
CASES = ("import torch\n"
         "def test_single_case(model, image):\n"
         "    model.eval()\n"
         "    return model(image.cuda())\n"
         "def test_all_case(model, images):\n"
         "    return [test_single_case(model, image) for image in images]\n")


@pytest.mark.parametrize("caller, reported", [
    ("with torch.no_grad():\n    test_all_case(net, images)\n", []),
    ("test_all_case(net, images)\n", [("utils.py", 4, "MEM004")]),
    # every way in must be grad-off: the helper called directly as well
    ("with torch.no_grad():\n    test_all_case(net, images)\n"
     "from utils import test_single_case\ntest_single_case(net, images[0])\n",
     [("utils.py", 4, "MEM004")]),
    # ... and called under no_grad there too
    ("with torch.no_grad():\n    test_all_case(net, images)\n"
     "    from utils import test_single_case\n    test_single_case(net, images[0])\n", []),
])
def test_grad_mode_comes_in_through_the_callers_of_a_helpers_callers(tmp_path, caller,
                                                                      reported):
    """Grad off where another file calls the function that calls the helper:
    off in the helper too (DHC's `test.py`, set 17)."""
    (tmp_path / "utils.py").write_text(CASES)
    (tmp_path / "test.py").write_text("import torch\nfrom utils import test_all_case\n" + caller)
    assert codes(tmp_path) == reported


#: FCGF's `benchmark_3dmatch.py`: `extract_features_batch` calls the helper
#: with grad on, and the script calls it under `no_grad` only
BATCHES = ("import torch\nfrom utils import evaluate\n"
           "def extract_features_batch(model, loader):\n"
           "    return evaluate(model, loader)\n")


@pytest.mark.parametrize("script, more, reported", [
    ("with torch.no_grad():\n    extract_features_batch(net, loader)\n", "", []),
    ("extract_features_batch(net, loader)\n", "", [("utils.py", 4, "MEM004")]),
    # a third file runs the caller with grad on: grad is on in the helper
    ("with torch.no_grad():\n    extract_features_batch(net, loader)\n",
     "from benchmark import extract_features_batch\nextract_features_batch(net, loader)\n",
     [("utils.py", 4, "MEM004")]),
])
def test_a_helpers_caller_in_another_file_that_its_file_runs_grad_off(tmp_path, script, more,
                                                                        reported):
    (tmp_path / "utils.py").write_text(EVALUATE)
    (tmp_path / "benchmark.py").write_text(BATCHES + script)
    if more:
        (tmp_path / "demo.py").write_text("import torch\n" + more)
    assert codes(tmp_path) == reported


def test_a_helper_also_called_with_grad_on_at_module_level_stays_reported(tmp_path):
    (tmp_path / "utils.py").write_text(CASES + "test_all_case(None, [])\n")
    (tmp_path / "test.py").write_text(
        "import torch\nfrom utils import test_all_case\n"
        "with torch.no_grad():\n    test_all_case(net, images)\n")
    assert codes(tmp_path) == [("utils.py", 4, "MEM004")]


def test_relative_and_module_imports_name_the_same_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(EVALUATE)
    (package / "train.py").write_text(
        "import torch\nfrom pkg import utils\n"
        "@torch.no_grad()\ndef run(model, loader):\n    return utils.evaluate(model, loader)\n")
    assert codes(tmp_path) == []


@pytest.mark.parametrize("importing, call, grad_off, reported", [
    ("from .utils import evaluate", "evaluate", True, False),
    ("from . import utils", "utils.evaluate", True, False),
    ("from .utils import evaluate as run_eval", "run_eval", True, False),
    ("from .utils import evaluate", "evaluate", False, True),
])
def test_a_relative_import_names_the_function_it_imports(tmp_path, importing, call, grad_off,
                                                           reported):
    """melgan's `from .validation import validate`, called under no_grad."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(EVALUATE)
    body = f"    {call}(model, loader)\n"
    (package / "train.py").write_text(
        f"import torch\n{importing}\ndef fit(model, loader):\n"
        + ("    with torch.no_grad():\n    " + body if grad_off else body))
    assert codes(tmp_path) == ([("utils.py", 4, "MEM004")] if reported else [])


@pytest.mark.parametrize("guarded, reported", [(True, False), (False, True)])
@pytest.mark.parametrize("handed", [
    "    func = lambda **x: model(mode='test', **x)\n"
    "    return forward_collect(func, loader)\n",
    "    return forward_collect(lambda **x: model(mode='test', **x), loader)\n",
])
def test_a_forward_in_a_lambda_runs_in_the_grad_mode_of_the_helper_it_is_handed_to(
        tmp_path, handed, guarded, reported):
    """DenseCL (OpenSelfSup): `single_gpu_test` hands its forward, written as
    a lambda, to `nondist_forward_collect` of `openselfsup/utils/collect.py`
    (re-exported by the package), which calls it under `torch.no_grad()`."""
    package = tmp_path / "selfsup" / "utils"
    package.mkdir(parents=True)
    (tmp_path / "selfsup" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .collect import forward_collect\n")
    call = "            out = func(**data)\n" if not guarded else \
        "            with torch.no_grad():\n                out = func(**data)\n"
    (package / "collect.py").write_text(
        "import torch\ndef forward_collect(func, loader):\n    results = []\n"
        f"    for data in loader:\n        if data:\n{call}"
        "            results.append(out)\n    return results\n")
    (tmp_path / "test.py").write_text(
        "import torch\nfrom selfsup.utils import forward_collect\n"
        "def single_gpu_test(model, loader):\n    model.cuda()\n    model.eval()\n" + handed)
    found = [c for c in codes(tmp_path) if c[2] == "MEM004"]
    assert bool(found) == reported, found


def test_checked_alone_the_helper_is_judged_on_what_its_file_shows():
    assert [f.code for f in check_source(EVALUATE, "utils.py")] == ["MEM004"]


def test_a_tree_that_never_mentions_cuda_is_cpu_code(tmp_path):
    (tmp_path / "infer.py").write_text(
        "import torch\nmodel.load_state_dict(torch.load('model.pth'))\n"
        "def evaluate(model, loader):\n    model.eval()\n"
        "    return [model(x) for x, _ in loader]\n")
    assert codes(tmp_path) == []
    (tmp_path / "train.py").write_text("import torch\nfrom infer import evaluate\n"
                                       "device = torch.device('cuda')\n")
    assert [code for _, _, code in codes(tmp_path)] == ["MEM007", "MEM004"]


def test_a_part_of_the_tree_that_its_imports_keep_off_cuda_is_cpu_code(tmp_path):
    """A course repository: chapter 2 never touches CUDA, chapter 3 does."""
    for chapter, device in (("ch02", "cpu"), ("ch03", "cuda")):
        folder = tmp_path / chapter
        folder.mkdir()
        (folder / "model.py").write_text(f"import torch\ndevice = torch.device('{device}')\n")
        (folder / "run.py").write_text("import torch\nfrom model import device\n"
                                       "net.load_state_dict(torch.load('net.pt'))\n")
    assert codes(tmp_path) == [("run.py", 3, "MEM007")]
    assert check_paths([str(tmp_path)], jobs=1).findings[0].path.endswith("ch03/run.py")


def test_a_file_named_alone_reads_its_project_as_a_whole_tree_check_does(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    infer = tmp_path / "infer.py"
    infer.write_text("import torch\nfrom model import net\nstate = torch.load('model.pth')\n")
    (tmp_path / "model.py").write_text("net = None\n")

    def alone_and_whole() -> tuple[list[str], list[str]]:
        return ([f.code for f in check_paths([str(infer)], jobs=1).findings],
                [f.code for f in check_paths([str(tmp_path)], jobs=1).findings])

    assert alone_and_whole() == ([], [])
    (tmp_path / "model.py").write_text("net = None\nnet.to('cuda:0')\n")
    assert alone_and_whole() == (["MEM007"], ["MEM007"])


def test_the_load_message_fits_the_program(tmp_path):
    single = check_source("import torch\nnet.cuda()\nnet.load_state_dict(torch.load(p))\n")
    ranks = check_source("import torch\nimport torch.distributed as dist; dist.init_process_group('nccl')\n"
                         "net.load_state_dict(torch.load(p))\n")
    restored = check_source("import torch\nnet.cuda()\nhistory.append(torch.load(p))\n")
    assert "second copy of the checkpoint" in single[0].message
    assert "every rank" in ranks[0].message
    assert "every tensor restored" in restored[0].message


@pytest.mark.parametrize("guard", [
    "if args.gpu is None:",        # imagenet, SimSiam: one process drives every GPU
    "if rank in [-1, 0]:",         # YOLOv7: the main rank alone
    "if not args.distributed:",
])
def test_a_load_only_one_process_runs_is_not_said_of_every_rank(guard):
    source = ("import torch\nimport torch.distributed as dist\n"
              "dist.init_process_group('nccl')\n"
              f"{guard}\n    net.load_state_dict(torch.load(p))\n"
              "else:\n    net.load_state_dict(torch.load(p, map_location=f'cuda:{args.gpu}'))\n")
    found = check_source(source)
    assert [f.code for f in found] == ["MEM007"]
    assert "second copy of the checkpoint" in found[0].message and not found[0].related
    every_rank = check_source(source.replace(guard, "if args.resume:"))
    assert "every rank" in every_rank[0].message


def test_a_tensorrt_engines_state_is_not_a_checkpoint_of_gpu_tensors():
    source = ("import torch\nmodel.cuda()\ndef evaluate(trt_file):\n"
              "    from torch2trt import TRTModule\n    model_trt = TRTModule()\n"
              "    model_trt.load_state_dict(torch.load(trt_file))\n")
    assert check_source(source) == []
    engine_elsewhere = source.replace("from torch2trt import", "from nets import")
    assert [f.code for f in check_source(engine_elsewhere)] == ["MEM007"]


def test_a_whole_pickled_model_is_the_model_not_a_second_copy():
    for source in ("import torch\nnet = torch.load(p).cuda()\n",
                   "import torch\nnet = torch.load(p)\nnet.eval()\nnet.cuda()\n"):
        assert check_source(source) == []
    ranks = "import torch\nimport torch.distributed as dist; dist.init_process_group('nccl')\nnet = torch.load(p).cuda()\n"
    assert [f.code for f in check_source(ranks)] == ["MEM007", "MEM008"]  # MEM008: no set_device before .cuda()


def test_a_loader_built_in_one_module_and_copied_to_the_gpu_in_another(tmp_path):
    (tmp_path / "data.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "def get_loader(ds):\n    return DataLoader(ds, batch_size=64, shuffle=True)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom data import get_loader\ndevice = torch.device('cuda')\n"
        "for x, y in get_loader(ds):\n    x = x.to(device)\n")
    assert codes(tmp_path) == [("data.py", 3, "MEM005")]
    (tmp_path / "train.py").write_text("from data import get_loader\n"
                                       "for x, y in get_loader(ds):\n    print(x.sum())\n")
    assert codes(tmp_path) == []


MAKE_LOADERS = ("from torch.utils.data import DataLoader\n"
                "def make_loaders(cfg):\n"
                "    train = DataLoader(Faces(cfg), batch_size=64, num_workers=4)\n"
                "    normal = DataLoader(Faces(cfg), batch_size=64, num_workers=4)\n"
                "    return train, normal, cfg.classes\n")


@pytest.mark.parametrize("script, reported", [
    # the second loader is unpacked into a name nothing reads: none of its batches is loaded
    ("train_loader, normal_loader, classes = make_loaders(cfg)\n"
     "# normal_loader was used for a second evaluation\n", [3]),
    # read after all
    ("train_loader, normal_loader, classes = make_loaders(cfg)\n"
     "for x, y in normal_loader:\n    x.cuda()\n", [3, 4]),
    # the result kept whole: what is done with it cannot be told
    ("loaders = make_loaders(cfg)\n", [3, 4]),
])
def test_a_returned_loader_every_caller_unpacks_and_never_reads(tmp_path, script, reported):
    package = tmp_path / "datasets"
    package.mkdir()
    (package / "__init__.py").write_text("from .make_loaders import make_loaders\n")
    (package / "make_loaders.py").write_text(MAKE_LOADERS)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom datasets import make_loaders\n" + script
        + "for x, y in train_loader:\n    x = x.cuda()\n")
    assert codes(tmp_path) == [("make_loaders.py", line, "MEM005") for line in reported]


def test_the_copy_message_needs_the_load_to_reach_load_state_dict():
    into = check_source("import torch\nnet.cuda()\nstate = torch.load(p)\n"
                        "net.load_state_dict(state['model'])\n")
    kept = check_source("import torch\nnet.cuda()\nfeatures = torch.load(p)\nuse(features)\n")
    assert "second copy of the checkpoint" in into[0].message
    assert "every tensor restored" in kept[0].message


PLAY = ("import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--cuda', {flag})\nargs = p.parse_args()\n"
        "device = torch.device('cuda' if args.cuda else 'cpu')\n"
        "net = Net().to(device)\nnet.load_state_dict(torch.load(args.model))\n")


@pytest.mark.parametrize("flag", [
    "action='store_true'",                  # CUDA when asked: how the program is meant to run
    "default=False, action='store_true'",
    "action='store_false'",                 # on unless turned off
    "action='store_true', default=True",
])
def test_cuda_behind_an_option_is_where_the_program_is_meant_to_run(tmp_path, flag):
    (tmp_path / "play.py").write_text(PLAY.format(flag=flag))
    assert [code for _, _, code in codes(tmp_path)] == ["MEM007"]


def test_a_program_that_hides_every_gpu_is_cpu_code(tmp_path):
    (tmp_path / "play.py").write_text("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '-1'\n"
                                      + PLAY.format(flag="action='store_false'"))
    assert codes(tmp_path) == []


POLICY = ("import torch\nclass Policy:\n    def __init__(self, actor):\n        self.actor = actor.cuda()\n"
          "    def evaluate_actions(self, obs, actions):\n"
          "        return self.actor(obs).log_prob(actions)\n")


def test_an_inference_named_method_that_other_files_call_to_train_is_a_training_forward(tmp_path):
    (tmp_path / "policy.py").write_text(POLICY)
    (tmp_path / "trainer.py").write_text(
        "class Trainer:\n    def update(self, obs, actions, adv):\n"
        "        logp = self.policy.evaluate_actions(obs, actions)\n"
        "        (-(logp * adv).mean()).backward()\n")
    assert codes(tmp_path) == []
    (tmp_path / "runner.py").write_text(
        "def log_probs(policy, obs, actions):\n    return policy.evaluate_actions(obs, actions)\n")
    assert codes(tmp_path) == [("policy.py", 6, "MEM004")]


@pytest.mark.parametrize("made_by, reported", [
    ("torch.distributions.Categorical(logits=logits)", False),  # torch's `sample`
    ("torch.compile(self.sampler)", True),  # the project's, compiled
    ("make_sampler(logits)", True),  # nobody can tell whose
])
def test_a_method_of_a_torch_object_is_not_a_call_of_the_projects_method(
        tmp_path, made_by, reported):
    (tmp_path / "sampler.py").write_text(  # unleashing-transformers' autoregressive sampler
        "import torch\nimport numpy as np\nfrom base import Sampler\n"
        "class AutoregressiveTransformer(Sampler):\n    def __init__(self, H):\n"
        "        self.seq_len = np.prod(H.latent_shape)\n    def sample(self, temp=1.0):\n"
        "        b, device = self.n_samples, 'cuda'\n"
        "        x = torch.zeros(b, 0).long().to(device)\n        for _ in range(self.seq_len):\n"
        "            logits = self.net(x)[:, -1]\n"
        "            x = torch.cat((x, torch.multinomial(logits.softmax(-1), 1)), dim=1)\n"
        "        return x\n")
    (tmp_path / "generate.py").write_text(
        "import torch\n@torch.no_grad()\ndef get_samples(sampler, x):\n"
        "    return sampler.sample(x)\n")
    (tmp_path / "diffusion.py").write_text(
        "import torch\nclass Diffusion:\n    def denoise(self, logits):\n"
        f"        dist = {made_by}\n        return dist.sample()\n")
    assert codes(tmp_path) == ([("sampler.py", 11, "MEM004")] if reported else [])


def test_batches_handed_to_a_helper_of_another_module_are_judged_by_what_it_does(tmp_path):
    (tmp_path / "val.py").write_text(
        "import torch\nimport numpy as np\n"
        "def score_volume(image, net):\n    image = image.squeeze(0).cpu().numpy()\n"
        "    x = torch.from_numpy(image[0]).float().cuda()\n    return net(x)\n"
        "def to_gpu(image):\n    return image.cuda()\n")
    train = ("import torch\nfrom torch.utils.data import DataLoader\nfrom val import {helper}\n"
             "def main(ds, net):\n    net.cuda()\n    loader = DataLoader(ds, batch_size=1)\n"
             "    for batch in loader:\n        {helper}(batch['image'], net)\n")
    (tmp_path / "train.py").write_text(train.format(helper="score_volume"))
    assert codes(tmp_path) == []  # the batch becomes numpy, a new tensor goes to the GPU
    (tmp_path / "train.py").write_text(train.format(helper="to_gpu"))
    assert codes(tmp_path) == [("train.py", 6, "MEM005")]


@pytest.mark.parametrize("keyword, reported", [("case", False), ("image", True)])
def test_a_part_of_the_batch_handed_by_keyword_is_judged_by_that_parameter(
        tmp_path, keyword, reported):
    (tmp_path / "val.py").write_text(
        "import torch\n"
        "def score_volume(image, net, case=None, *, extra=None):\n"
        "    image = image.squeeze(0).cpu().numpy()\n"
        "    print(case)\n    return net(torch.from_numpy(image).cuda())\n"
        "def to_gpu(net, image=None, case=None):\n    return net(image.cuda()), case\n")
    call = ("score_volume(batch['image'], net, case=batch['name'][0])" if keyword == "case"
            else "to_gpu(net, image=batch['image'], case=batch['name'][0])")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\nfrom val import score_volume, to_gpu\n"
        "def main(ds, net):\n    net.cuda()\n    loader = DataLoader(ds, batch_size=1)\n"
        f"    for batch in loader:\n        {call}\n")
    assert codes(tmp_path) == ([("train.py", 6, "MEM005")] if reported else [])


def test_a_distributed_import_never_called_does_not_make_ranks():
    source = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "net.cuda()\nnet.load_state_dict(torch.load(p))\n")
    assert "every rank" not in check_source(source)[0].message
    launched = source + "net = DDP(net)\n"
    assert "every rank" in check_source(launched)[0].message


@pytest.mark.parametrize("saved, reported", [
    ("self.args", False),  # the command-line arguments: no tensors
    ("{k: v.cpu() for k, v in self.model.state_dict().items()}", False),
    ("self.model.state_dict()", True),  # the GPU model's own state
])
def test_a_file_saved_by_another_module_is_judged_by_what_it_holds(tmp_path, saved, reported):
    """R-BERT: trainer.py saves `training_args.bin`, predict.py loads it."""
    (tmp_path / "trainer.py").write_text(
        "import os\nimport torch\n"
        "class Trainer:\n    def __init__(self, args, model):\n"
        "        self.args, self.model = args, model.cuda()\n"
        "    def save(self):\n"
        f"        torch.save({saved}, os.path.join(self.args.model_dir, 'training_args.bin'))\n")
    (tmp_path / "predict.py").write_text(
        "import os\nimport torch\n"
        "def get_args(config):\n"
        "    return torch.load(os.path.join(config.model_dir, 'training_args.bin'))\n"
        "x = torch.zeros(1).cuda()\n")
    assert codes(tmp_path) == ([("predict.py", 4, "MEM007")] if reported else [])


@pytest.mark.parametrize("decorated, reported", [(True, False), (False, True)])
def test_a_model_whose_forward_disables_grad_in_another_file(tmp_path, decorated, reported):
    """DiffVC: `model/vc.py` decorates `DiffVC.forward` with @torch.no_grad()."""
    (tmp_path / "vc.py").write_text(
        "import torch\nclass DiffVC(torch.nn.Module):\n"
        + ("    @torch.no_grad()\n" if decorated else "")
        + "    def forward(self, x):\n        return x * 2\n")
    (tmp_path / "infer.py").write_text(
        "import torch\nfrom vc import DiffVC\n"
        "generator = DiffVC()\ngenerator = generator.cuda()\ngenerator.eval()\n"
        "out = generator(torch.zeros(3).cuda())\n")
    assert codes(tmp_path) == ([("infer.py", 6, "MEM004")] if reported else [])


@pytest.mark.parametrize("decorated, annotation, reported", [
    (True, ": Transformer", False), (False, ": Transformer", True), (True, "", True)])
def test_a_model_known_by_its_parameters_annotation(tmp_path, decorated, annotation, reported):
    """LLaMA-Adapter's `generation.py`: `LLaMA(model: Transformer)` runs
    `self.model.forward(...)`, and `model.py` decorates `Transformer.forward`
    with @torch.inference_mode(). Without the annotation the class is unknown."""
    (tmp_path / "model.py").write_text(
        "import torch\nclass Transformer(torch.nn.Module):\n"
        + ("    @torch.inference_mode()\n" if decorated else "")
        + "    def forward(self, tokens, start):\n        return tokens * 2\n")
    (tmp_path / "generation.py").write_text(
        "import torch\nfrom model import Transformer\n"
        f"class LLaMA:\n    def __init__(self, model{annotation}):\n        self.model = model\n"
        "    def generate(self, tokens):\n        self.model.eval()\n"
        "        return self.model.forward(tokens.cuda(), 0)\n")
    assert codes(tmp_path) == ([("generation.py", 8, "MEM004")] if reported else [])


def test_a_library_base_class_annotation_leaves_the_model_class_unknown(tmp_path):
    """MACE's `evaluate(model: torch.nn.Module, ...)`: any model of the
    program may come in, and its model's forward differentiates (forces)."""
    (tmp_path / "model.py").write_text(
        "import torch\nclass Energy(torch.nn.Module):\n"
        "    def forward(self, positions):\n"
        "        energy = (positions ** 2).sum()\n"
        "        return torch.autograd.grad(energy, positions, create_graph=True)[0]\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom model import Energy\n"
        "def evaluate(model: torch.nn.Module, loader):\n    model.eval()\n"
        "    return [model(x.cuda()).sum().item() for x in loader]\n")
    assert codes(tmp_path) == []


@pytest.mark.parametrize("saver, reported", [
    # KAIR's save_network: every tensor moved to the CPU before the save
    ("    state_dict = network.state_dict()\n"
     "    for key, param in state_dict.items():\n"
     "        state_dict[key] = param.cpu()\n"
     "    torch.save(state_dict, path)\n", False),
    ("    torch.save(network.state_dict(), path)\n", True),  # the GPU model's own state
    # a saver that moves some tensors only: not every item is on the CPU
    ("    state_dict = network.state_dict()\n"
     "    for key, param in state_dict.items():\n"
     "        if key.endswith('bias'):\n            state_dict[key] = param.cpu()\n"
     "    torch.save(state_dict, path)\n", True),
])
def test_checkpoints_of_a_project_whose_savers_move_weights_to_the_cpu(tmp_path, saver, reported):
    """KAIR: models/model_base.py saves every network through one CPU saver
    (its optimizer states go through another, loaded back by optimizers);
    main_test_*.py load the checkpoints by paths built at run time."""
    (tmp_path / "model_base.py").write_text(
        "import torch\n"
        f"def save_network(network, path):\n{saver}"
        "def save_optimizer(optimizer, path):\n"
        "    torch.save(optimizer.state_dict(), path)\n")
    (tmp_path / "main_test.py").write_text(
        "import torch\nfrom model_base import save_network\n"
        "model = Net().cuda()\n"
        "model.load_state_dict(torch.load(model_path))\n")
    assert codes(tmp_path) == ([("main_test.py", 4, "MEM007")] if reported else [])


BASICSR_SAVER = (
    "import torch\nfrom basicsr.utils import logger\n"
    "class BaseModel:\n"
    "    def __init__(self, opt):\n"
    "        self.device = torch.device('cuda' if opt['num_gpu'] != 0 else 'cpu')\n"
    "    def save_network(self, net, param_key, path):\n"
    "        save_dict = {}\n"
    "        state_dict = net.state_dict()\n"
    "        for key, param in state_dict.items():\n"
    "            if key.startswith('module.'):\n                key = key[7:]\n"
    "            state_dict[key] = param.cpu()\n"
    "        save_dict[param_key] = state_dict\n"
    "{extra}"
    "        torch.save(save_dict, path)\n"
    "    def save_training_state(self, epoch, path):\n"
    "        state = {'epoch': epoch, 'optimizers': [], 'schedulers': []}\n"
    "        for o in self.optimizers:\n            state['optimizers'].append(o.state_dict())\n"
    "        torch.save(state, path)\n")


@pytest.mark.parametrize("extra, reported", [
    ("", False),
    # one entry not shown on the CPU: the saved dict may hold GPU tensors
    ("        save_dict['ema'] = self.net_ema.state_dict()\n", True),
])
def test_a_package_saver_that_nests_cpu_state_dicts(tmp_path, extra, reported):
    """BasicSR (vendored by Restormer, EDVR and many more): `save_network`
    nests state dicts moved to the CPU in a dict; the training state holds
    the optimizers' state; FID statistics are NumPy arrays. A test script
    imports an architecture from the package, whose `__init__` runs first:
    it belongs to the package's program, whose checkpoints hold CPU tensors."""
    package = tmp_path / "basicsr"
    (package / "models" / "archs").mkdir(parents=True)
    (package / "utils").mkdir()
    (package / "__init__.py").write_text("from .models import *\nfrom .utils import *\n")
    (package / "utils" / "__init__.py").write_text("logger = None\n")
    (package / "models" / "__init__.py").write_text(
        "import importlib\nmodules = [importlib.import_module(f'basicsr.models.{n}') for n in []]\n")
    (package / "models" / "base_model.py").write_text(BASICSR_SAVER.replace("{extra}", extra))
    (package / "models" / "archs" / "__init__.py").write_text("")
    (package / "models" / "archs" / "net_arch.py").write_text(
        "import torch\nclass Net(torch.nn.Module):\n    pass\n")
    (tmp_path / "fid_stats.py").write_text(
        "import numpy as np\nimport torch\nimport basicsr\n"
        "def stats(features, args):\n    mean = np.mean(features, 0)\n"
        "    cov = np.cov(features, rowvar=False)\n"
        "    torch.save(dict(name=args.name, size=args.size, mean=mean, cov=cov), 'stats.pth')\n")
    (tmp_path / "test.py").write_text(
        "import torch\nfrom basicsr.models.archs.net_arch import Net\n"
        "model = Net()\nmodel.load_state_dict(torch.load(args.weights)['params'])\n"
        "model.cuda()\n")
    assert codes(tmp_path) == ([("test.py", 4, "MEM007")] if reported else [])


@pytest.mark.parametrize("checkpoint, reported", [
    # YOLOv7's checkpoint: the model itself beside the optimizer's state
    ("{'epoch': epoch, 'model': deepcopy(model).half(), 'optimizer': optimizer.state_dict()}",
     True),
    ("{'epoch': epoch, 'optimizer': optimizer.state_dict()}", False),  # bookkeeping only
])
def test_a_checkpoint_with_an_optimizer_may_hold_the_model_too(tmp_path, checkpoint, reported):
    (tmp_path / "train.py").write_text(
        "import torch\nfrom copy import deepcopy\n"
        "def save(model, optimizer, epoch):\n"
        "    torch.save(model.cpu().state_dict(), 'weights.pt')\n"
        f"    torch.save({checkpoint}, 'last.pt')\n")
    (tmp_path / "test.py").write_text(
        "import torch\nimport train\nnet = Net().cuda()\n"
        "net.load_state_dict(torch.load(args.weights))\n")
    assert codes(tmp_path) == ([("test.py", 4, "MEM007")] if reported else [])


def test_a_converter_without_cuda_saves_cpu_weights_unless_it_re_saves_a_load(tmp_path):
    """A conversion script that never mentions CUDA saves what it built on the
    CPU; one that loads a checkpoint and saves it again passes its devices on
    and says nothing of them."""
    (tmp_path / "convert.py").write_text(
        "import torch\nimport torchvision\n"
        "model = torchvision.models.vgg19()\n"
        "torch.save(model.state_dict(), 'vgg.pth')\n")
    (tmp_path / "test.py").write_text(
        "import torch\nimport convert\nnet = Net().cuda()\n"
        "net.load_state_dict(torch.load(args.weights))\n")
    assert codes(tmp_path) == []
    (tmp_path / "convert.py").write_text(
        "import torch\nstate = torch.load('old.pth')\n"
        "torch.save({k[7:]: v for k, v in state.items()}, 'new.pth')\n")
    assert ("test.py", 4, "MEM007") in codes(tmp_path)


def test_only_the_savers_of_the_loading_program_count(tmp_path):
    """Two unrelated scripts side by side: one saves CPU weights, the other
    loads a checkpoint and imports nothing of the first: still reported."""
    (tmp_path / "export_cpu.py").write_text(
        "import torch\nnet = Net()\ntorch.save(net.cpu().state_dict(), 'net.pth')\n")
    (tmp_path / "evaluate.py").write_text(
        "import torch\nnet = Net().cuda()\nnet.load_state_dict(torch.load(args.weights))\n")
    assert codes(tmp_path) == [("evaluate.py", 3, "MEM007")]
    (tmp_path / "evaluate.py").write_text("import export_cpu\n" + (
        tmp_path / "evaluate.py").read_text())
    assert codes(tmp_path) == []


def test_weights_of_an_imported_project_class_are_not_made_without_cuda(tmp_path):
    """Udacity's DQN notebook never mentions CUDA, but its Agent (dqn_agent.py)
    puts the Q-network on the GPU: the checkpoint it saves holds CUDA tensors."""
    (tmp_path / "dqn_agent.py").write_text(
        "import torch\ndevice = torch.device('cuda:0')\n"
        "class Agent:\n    def __init__(self):\n        self.q = Net().to(device)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom dqn_agent import Agent\nagent = Agent()\n"
        "def dqn():\n    torch.save(agent.q.state_dict(), 'checkpoint.pth')\n"
        "dqn()\nagent.q.load_state_dict(torch.load('checkpoint.pth'))\n")
    assert codes(tmp_path) == [("train.py", 7, "MEM007")]


COLLATE = ("import torch\n"
           "def custom_collate_fn(batch, device='cpu'):\n"
           "    return torch.stack(batch).to(device)\n")


@pytest.mark.parametrize("workers, reported", [
    ("0", False),  # every loader that uses it runs in the main process
    ("4", True),   # a worker process would make its own CUDA context
    (None, True),  # no loader in the project: it is flagged where it is defined
])
def test_a_collate_function_is_judged_by_the_loaders_of_the_files_that_import_it(
        tmp_path, workers, reported):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ch07.py").write_text(COLLATE)
    if workers is not None:
        (tmp_path / "train.py").write_text(
            "import torch\nfrom functools import partial\nfrom torch.utils.data import DataLoader\n"
            "from pkg.ch07 import custom_collate_fn\n"
            "collate = partial(custom_collate_fn, device='cuda')\n"
            f"num_workers = {workers}\n"
            "loader = DataLoader(data, batch_size=8, collate_fn=collate, num_workers=num_workers)\n"
            "model = torch.nn.Linear(2, 2).cuda()\n")
    found = [c for c in codes(tmp_path) if c[2] == "MEM002"]
    assert found == ([("ch07.py", 3, "MEM002")] if reported else [])


EVAL_DATA = ("import torch\nfrom torch.utils.data import Dataset\n"
             "class IconQAEvalData(Dataset):\n"
             "    def __getitem__(self, i):\n"
             "        return self.images[i].cuda()\n")


@pytest.mark.parametrize("loader, reported", [
    ("DataLoader(data, batch_size=8, shuffle=False)", False),  # MiniGPT-4's eval_vqa.py
    ("DataLoader(data, batch_size=8, num_workers=4)", True),
    (None, True),  # no loader in the project: flagged where it is defined
])
def test_a_data_set_class_is_judged_by_the_loaders_of_the_files_that_import_it(
        tmp_path, loader, reported):
    """A data set whose `__getitem__` moves items to CUDA runs in a worker only
    where a loader with workers is given it: another file's loaders decide."""
    (tmp_path / "vqa_datasets.py").write_text(EVAL_DATA)
    if loader is not None:
        (tmp_path / "eval_vqa.py").write_text(
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "from vqa_datasets import IconQAEvalData\n"
            f"data = IconQAEvalData()\nloader = {loader}\n")
    found = [c for c in codes(tmp_path) if c[2] == "MEM002"]
    assert found == ([("vqa_datasets.py", 5, "MEM002")] if reported else [])


@pytest.mark.parametrize("test_file, reported", [
    ("tests/test_data.py", True),  # a unit test's loader says nothing of the data set's use
    ("eval_vqa.py", False),  # a program's loader, in the main process
])
def test_a_unit_tests_loader_does_not_decide_where_a_data_set_runs(
        tmp_path, test_file, reported):
    """A library's data set (PaccMann's, loaded through its package) whose
    only loader in the project is a unit test's, without workers."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .vqa_datasets import IconQAEvalData\n")
    (package / "vqa_datasets.py").write_text(EVAL_DATA)
    (tmp_path / test_file).parent.mkdir(exist_ok=True)
    body = ("data = IconQAEvalData()\n"
            "loader = DataLoader(data, batch_size=8, shuffle=False)\n")
    if test_file.startswith("tests/"):
        body = "def test_loads():\n" + "".join(f"    {line}\n" for line in body.splitlines())
    (tmp_path / test_file).write_text(
        "from torch.utils.data import DataLoader\nfrom pkg import IconQAEvalData\n" + body)
    found = [c for c in codes(tmp_path) if c[2] == "MEM002"]
    assert found == ([("vqa_datasets.py", 5, "MEM002")] if reported else [])


MODEL = ("import torch\n"
         "class Model(torch.nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.head = torch.nn.Linear(8, 2)\n"
         "    def forward(self, x, y):\n"
         "        align_loss = 0\n"
         "        loss = torch.nn.functional.cross_entropy(self.head(x), y)\n"
         "        return loss, {kept}, align_loss\n")
TRAIN_STEPS = ("import torch\n"
               "from model import Model\n"
               "def train(model, loader, optimizer):\n"
               "    dual_losses, align_losses = [], []\n"
               "    for x, y in loader:\n"
               "        loss, dual_loss, align_loss = model(x.cuda(), y.cuda())\n"
               "        loss.backward()\n"
               "        optimizer.step()\n"
               "        dual_losses.append(dual_loss)\n"
               "        align_losses.append(align_loss)\n")


@pytest.mark.parametrize("kept, reported", [
    ("loss.item()", [("train.py", 9, "MEM003")][:0]),  # the forward gives Python numbers there
    ("loss * 2", [("train.py", 9, "MEM003")]),          # a tensor with the forward's graph
])
def test_what_a_model_returns_at_a_position_is_read_from_the_programs_forward(
        tmp_path, kept, reported):
    (tmp_path / "model.py").write_text(MODEL.format(kept=kept))
    (tmp_path / "train.py").write_text(TRAIN_STEPS)
    assert [c for c in codes(tmp_path) if c[2] == "MEM003"] == reported


SUPER_RESOLUTION = (
    "import argparse, torch\nfrom torch.utils.data import DataLoader\n"
    "parser = argparse.ArgumentParser()\n"
    "parser.add_argument('--{option}', action='store_true', help='Enables acceleration')\n"
    "opt = parser.parse_args()\n"
    "if opt.{option} and torch.accelerator.is_available():\n"
    "    device = torch.accelerator.current_accelerator()\n"
    "else:\n"
    "    device = torch.device('cpu')\n"
    "loader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
    "for batch in loader:\n"
    "    x, y = batch[0].to(device), batch[1].to(device)\n")


@pytest.mark.parametrize("option, when", [
    ("accel", " when run with --accel"),  # pytorch/examples: the accelerator when asked
    ("verbose", ""),                      # not a device switch: whenever there is one
])
def test_an_accelerator_behind_an_option_is_reported_with_the_option(tmp_path, option, when):
    (tmp_path / "main.py").write_text(SUPER_RESOLUTION.format(option=option))
    [finding] = check_paths([str(tmp_path)], jobs=1).findings
    assert finding.code == "MEM005"
    assert f"copies batches to a CUDA device{when}:" in finding.message


WAVE_U_NET = ("import argparse, torch\nfrom torch.utils.data import DataLoader\n"
              "parser = argparse.ArgumentParser()\n"
              "parser.add_argument('--cuda', {flag})\nargs = parser.parse_args()\n"
              "loader = DataLoader(ds, batch_size=8)\n"
              "for x, y in loader:\n    if args.cuda:\n        x = x.cuda()\n")


@pytest.mark.parametrize("flag, hidden, reported", [
    ("action='store_true'", "", True),    # Wave-U-Net: the GPU when asked, as meant
    ("action='store_false'", "", True),   # on unless turned off
    ("action='store_true'", "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n", False),
])
def test_a_file_checked_alone_is_cpu_code_only_where_it_hides_the_gpus(
        tmp_path, flag, hidden, reported):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    train = tmp_path / "train.py"
    train.write_text(hidden + WAVE_U_NET.format(flag=flag))
    found = [f.code for f in check_paths([str(train)], jobs=1).findings]
    assert found == (["MEM005"] if reported else [])


NLP_BOOK = ("import torch\nfrom argparse import Namespace\n"
            "from torch.utils.data import DataLoader\n"
            "args = Namespace(batch_size=64, cuda={cuda})\n"
            "if not torch.cuda.is_available():\n    args.cuda = False\n"
            "args.device = torch.device('cuda' if args.cuda else 'cpu')\n"
            "loader = DataLoader(ds, batch_size=args.batch_size)\n"
            "for x, y in loader:\n    x = x.to(args.device)\n")


@pytest.mark.parametrize("cuda, reported", [("False", False), ("True", True)])
def test_cuda_switched_off_in_a_namespace_of_settings_is_cpu_code(tmp_path, cuda, reported):
    (tmp_path / "classify.py").write_text(NLP_BOOK.format(cuda=cuda))
    assert [code for _, _, code in codes(tmp_path)] == (["MEM005"] if reported else [])


@pytest.mark.parametrize("imports", [
    "import torch.optim as optim\nfrom utils.metrics import *",  # KGAT: torch from the helpers
    "import torch.optim as optim\nimport torch",
])
def test_torch_brought_by_a_helpers_star_import_is_torch(imports):
    source = (f"{imports}\ndef evaluate(model, loader):\n    model.eval()\n"
              "    with torch.no_grad():\n        return [model(x.cuda()) for x in loader]\n")
    assert check_source(source) == []
    unguarded = source.replace("with torch.no_grad():", "if True:")
    assert [f.code for f in check_source(unguarded)] == ["MEM004"]


LOSSES = ("import torch\n"
          "class NLLLoss:\n"
          "    def __init__(self):\n        self.acc_loss = 0\n        self.norm_term = 0\n"
          "    def eval_batch(self, outputs, target):\n"
          "        self.acc_loss += torch.nn.functional.nll_loss(outputs, target)\n"
          "        self.norm_term += 1\n"
          "    def get_loss(self):\n"
          "        if isinstance(self.acc_loss, int):\n            return 0\n"
          "        loss = {kept}\n        return loss\n")
TRAINER = ("import torch\nfrom losses import NLLLoss\n"
           "class Trainer:\n"
           "    def __init__(self):\n        self.loss = NLLLoss()\n"
           "    def _train_batch(self, x, y, model):\n"
           "        loss = self.loss\n        loss.eval_batch(model(x.cuda()), y.cuda())\n"
           "        self.loss.acc_loss.backward()\n        return loss.get_loss()\n"
           "    def train(self, data, model):\n        total = 0\n"
           "        for x, y in data:\n"
           "            loss = self._train_batch(x, y, model)\n"
           "            total += loss\n")


@pytest.mark.parametrize("kept, reported", [
    ("self.acc_loss.data.item()", False),  # IBM's seq2seq: the Loss object gives a float
    ("self.acc_loss", True),               # the tensor itself, with its graph
])
def test_a_get_method_of_the_programs_own_object_is_judged_by_its_definition(
        tmp_path, kept, reported):
    (tmp_path / "losses.py").write_text(LOSSES.format(kept=kept))
    (tmp_path / "trainer.py").write_text(TRAINER)
    found = [c for c in codes(tmp_path) if c[2] == "MEM003"]
    assert found == ([("trainer.py", 15, "MEM003")] if reported else [])


BATCH_TRAINER = ("import torch\nclass Trainer:\n"
           "    def __init__(self, model, train_loader):\n"
           "        self.device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
           "        self.model = model.to(self.device)\n        self.train_data = train_loader\n"
           "    def train(self):\n        self.iteration(self.train_data)\n"
           "    def iteration(self, loader):\n"
           "        for batch in loader:\n"
           "            batch = {k: v.{move} for k, v in batch.items()}\n"
           "            self.model(**batch)\n")


@pytest.mark.parametrize("move, reported", [
    ("to(self.device)", True),   # BERT-pytorch: the trainer copies every batch to the GPU
    ("numpy()", False),          # the trainer keeps its batches on the host
])
def test_a_loader_handed_to_a_trainer_class_of_another_file(tmp_path, move, reported):
    package = tmp_path / "pkg"
    (package / "trainer").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "trainer" / "__init__.py").write_text("from .pretrain import Trainer\n")
    (package / "trainer" / "pretrain.py").write_text(BATCH_TRAINER.replace("{move}", move))
    (package / "__main__.py").write_text(
        "from torch.utils.data import DataLoader\nfrom .trainer import Trainer\n"
        "def main():\n    loader = DataLoader(ds, batch_size=32, num_workers=4)\n"
        "    Trainer(model, train_loader=loader).train()\n")
    assert codes(tmp_path) == ([("__main__.py", 4, "MEM005")] if reported else [])


@pytest.mark.parametrize("move, reported", [("to(self.device)", True), ("numpy()", False)])
def test_a_loader_returned_to_a_script_that_hands_it_to_a_trainer(tmp_path, move, reported):
    (tmp_path / "data_loader.py").write_text(
        "from torch.utils import data\ndef get_loader(path):\n"
        "    return data.DataLoader(Folder(path), batch_size=8, num_workers=2)\n")
    (tmp_path / "solver.py").write_text(BATCH_TRAINER.replace("{move}", move))
    (tmp_path / "main.py").write_text(
        "from solver import Trainer\nfrom data_loader import get_loader\n"
        "Trainer(model, get_loader('train')).train()\n")
    assert codes(tmp_path) == ([("data_loader.py", 3, "MEM005")] if reported else [])


def test_loaders_collected_in_a_returned_list_are_iterated_by_the_importer(tmp_path):
    (tmp_path / "featurization.py").write_text(
        "from torch.utils.data import DataLoader\ndef construct_loader(modes):\n    loaders = []\n"
        "    for mode in modes:\n"
        "        loader = DataLoader(Confs(mode), batch_size=16, pin_memory=False)\n"
        "        loaders.append(loader)\n    return loaders\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom featurization import construct_loader\n"
        "train_loader, val_loader = construct_loader(['train', 'val'])\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "for data in train_loader:\n    data = data.to(device)\n")
    assert codes(tmp_path) == [("featurization.py", 5, "MEM005")]


@pytest.mark.parametrize("move, reported", [(".float().to(self.dev)", True), (".numpy()", False)])
def test_a_loader_kept_in_a_dict_on_the_object_for_a_subclass_to_iterate(
        tmp_path, move, reported):
    (tmp_path / "processor").mkdir()
    (tmp_path / "processor" / "__init__.py").write_text("")
    (tmp_path / "processor" / "processor.py").write_text(
        "import torch\nclass Processor:\n    def __init__(self):\n        self.dev = 'cuda:0'\n"
        "    def load_data(self):\n"
        "        self.data_loader = dict()\n"
        "        self.data_loader['train'] = torch.utils.data.DataLoader(Feeder(), batch_size=64)\n")
    (tmp_path / "processor" / "recognition.py").write_text(
        "from .processor import Processor\nclass REC_Processor(Processor):\n"
        "    def train(self):\n        for data, label in self.data_loader['train']:\n"
        f"            data = data{move}\n            self.model(data)\n")
    assert codes(tmp_path) == ([("processor.py", 7, "MEM005")] if reported else [])


def test_a_variant_the_project_leaves_in_preview_is_shown_only_with_preview(
        tmp_path, preview_filtered_as_shipped):
    """Settled with the project (a data-set class of another file that decodes
    no media), then filtered as a variant the rule marked itself: left out by
    default, shown with `--preview`."""
    from memlint import Settings

    (tmp_path / "data.py").write_text(
        "from torch.utils.data import Dataset\n"
        "class Ids(Dataset):\n    def __getitem__(self, i):\n        return self.ids[i]\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\nfrom data import Ids\n"
        "def train(model):\n    loader = DataLoader(Ids(), batch_size=8)\n"
        "    for x in loader:\n        model(x.cuda())\n")
    assert check_paths([str(tmp_path)], Settings(), jobs=1).findings == []
    [finding] = check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
    assert (finding.code, finding.preview) == ("MEM005", True)


@pytest.mark.parametrize("reads, preview", [
    ("Image.open(self.paths[i]).convert('RGB')", False),  # decoded images: float samples
    ("self.ids[i]", True),  # what it gives the code does not show
])
def test_a_loader_of_a_data_set_class_of_another_file_is_judged_by_that_class(
        tmp_path, reads, preview):
    """The data set's class lives in `data.py`, the loader in `train.py`: the
    class decoding images there is what makes pinning worth it here."""
    (tmp_path / "data.py").write_text(
        "from PIL import Image\nfrom torch.utils.data import Dataset\n"
        "class Frames(Dataset):\n    def __getitem__(self, i):\n"
        f"        return {reads}\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\nfrom data import Frames\n"
        "def train(model, paths):\n"
        "    loader = DataLoader(Frames(paths), batch_size=8, num_workers=4)\n"
        "    for x in loader:\n        model(x.cuda())\n")
    [finding] = check_paths([str(tmp_path)], jobs=1).findings
    assert (finding.path.endswith("train.py"), finding.line, finding.code, finding.preview) \
        == (True, 5, "MEM005", preview)


def test_a_path_rebound_without_a_file_name_keeps_the_name_it_had(tmp_path):
    """Swin-Unet: `snapshot = snapshot.replace("best_model", "epoch_9")` spells
    no file name; the file is still the `best_model.pth` the trainer writes,
    here from CPU values, so the load restores no GPU tensors."""
    (tmp_path / "trainer.py").write_text(
        "import os\nimport torch\ndef train(model, out):\n    model.cuda()\n"
        "    state = {k: v.cpu() for k, v in model.state_dict().items()}\n"
        "    torch.save(state, os.path.join(out, 'best_model.pth'))\n")
    test = ("import os\nimport torch\ndef test(net, out):\n    net.cuda()\n"
            "    snapshot = os.path.join(out, 'best_model.pth')\n"
            "    if not os.path.exists(snapshot):\n"
            "        snapshot = snapshot.replace('best_model', 'epoch_9')\n"
            "    net.load_state_dict(torch.load(snapshot))\n")
    (tmp_path / "test.py").write_text(test)
    assert codes(tmp_path) == []
    (tmp_path / "test.py").write_text(test.replace("best_model.pth", "other.pth"))
    assert codes(tmp_path) == [("test.py", 8, "MEM007")]


@pytest.mark.parametrize("snapshot, reported", [
    ("module = copy.deepcopy(module).eval().requires_grad_(False).cpu()", False),
    ("module = copy.deepcopy(module).eval().requires_grad_(True).cpu()", True),
    ("module = copy.deepcopy(module).train().cpu()", True),
    ("pass", True),  # what is pickled cannot be told: the load may hold anything
])
def test_a_model_unpickled_from_the_projects_frozen_snapshots_records_no_graph(
        tmp_path, snapshot, reported):
    """StyleGAN2-ADA and its many forks: the training loop pickles frozen
    copies of its networks; `generate.py` unpickles `G_ema` through
    `legacy.load_network_pkl` (an `Unpickler` subclass) and runs it."""
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("")
    (tmp_path / "training" / "loop.py").write_text(
        "import copy, pickle, torch\n"
        "def training_loop(G, D, G_ema, path):\n"
        "    G.cuda()\n"
        "    snapshot_data = dict(settings=dict(lr=0.1))\n"
        "    for name, module in [('G', G), ('D', D), ('G_ema', G_ema)]:\n"
        f"        {snapshot}\n"
        "        snapshot_data[name] = module\n"
        "    with open(path, 'wb') as f:\n"
        "        pickle.dump(snapshot_data, f)\n")
    (tmp_path / "legacy.py").write_text(
        "import pickle\n"
        "def load_network_pkl(f):\n"
        "    data = _LegacyUnpickler(f).load()\n"
        "    return data\n"
        "class _LegacyUnpickler(pickle.Unpickler):\n"
        "    pass\n")
    (tmp_path / "generate.py").write_text(
        "import torch\nimport legacy\nimport training.loop\n"
        "def generate_images(network_pkl, seeds):\n"
        "    device = torch.device('cuda')\n"
        "    with open(network_pkl, 'rb') as f:\n"
        "        G = legacy.load_network_pkl(f)['G_ema'].to(device)\n"
        "    G.eval()\n"
        "    for seed in seeds:\n"
        "        img = G(torch.randn(1, 512, device=device))\n")
    found = [c for c in codes(tmp_path) if c[2] == "MEM004"]
    assert found == ([("generate.py", 10, "MEM004")] if reported else []), found


@pytest.mark.parametrize("move, reported", [("_checkpoint_cpu.cpu()", False), ("pass", True)])
def test_a_checkpoint_whose_path_is_built_at_run_time_is_paired_with_its_save(
        tmp_path, move, reported):
    """PyCIL: `memo.py` saves a `.cpu()` copy of the network to
    `"{}_{}.pkl".format(f"checkpoints/finetune_{name}", task)`; `inc_net.py`
    loads `f"checkpoints/finetune_{name}_0.pkl"` (bound in both branches of
    an `if`, then edited with `.replace`): `finetune_*_0.pkl` can be one of
    `finetune_*_*.pkl`, and not the GPU weights saved to `last.pth`."""
    (tmp_path / "models").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "models" / "memo.py").write_text(
        "import copy, torch\nfrom utils.inc_net import Net\nclass Memo:\n"
        "    def train(self):\n        self._network = Net().cuda()\n"
        "        torch.save(self._network.state_dict(), f\"{self.args['out']}/last.pth\")\n"
        "    def save_checkpoint(self, test_acc):\n"
        "        checkpoint_name = f\"checkpoints/finetune_{self.args['csv_name']}\"\n"
        "        _checkpoint_cpu = copy.deepcopy(self._network)\n"
        f"        {move}\n"
        "        save_dict = {'tasks': self._cur_task, 'test_acc': test_acc,\n"
        "                     'convnet': _checkpoint_cpu.convnet.state_dict()}\n"
        "        torch.save(save_dict, '{}_{}.pkl'.format(checkpoint_name, self._cur_task))\n")
    (tmp_path / "utils" / "inc_net.py").write_text(
        "import torch\nclass Net(torch.nn.Module):\n"
        "    def load_checkpoint(self, args):\n"
        "        if args['init_cls'] == 50:\n"
        "            checkpoint_name = f\"checkpoints/finetune_{args['dataset']}_0.pkl\"\n"
        "        else:\n"
        "            checkpoint_name = f\"checkpoints/finetune_{args['csv_name']}_0.pkl\"\n"
        "        checkpoint_name = checkpoint_name.replace('memo_', '')\n"
        "        model_infos = torch.load(checkpoint_name)\n"
        "        self.convnet.load_state_dict(model_infos['convnet'])\n")
    found = [c for c in codes(tmp_path) if c[2] == "MEM007"]
    assert found == ([("inc_net.py", 9, "MEM007")] if reported else []), found


@pytest.mark.parametrize("named, other, same", [
    ("finetune_*_0.pkl", "finetune_*_*.pkl", True),
    ("finetune_*_0.pkl", "best.pt", False),
    ("model_*.pt", "model_final.pt", True),
    ("model_*.pt", "model_final.pth", False),
    ("*_best.pt", "ckpt_*", True),
    ("best.pt", "best.pt", True),
])
def test_file_names_with_unknown_parts_name_the_same_file_only_where_they_can(named, other, same):
    from memlint.analysis.file_names import same_file
    assert same_file(named, other) is same and same_file(other, named) is same


@pytest.mark.parametrize("reader, preview", [
    ("from PIL import Image\ndef read_image(path):\n    return Image.open(path)\n", False),
    ("import cv2 as cv\ndef read_image(path):\n    return cv.imread(path)\n", False),
    ("import json\ndef read_image(path):\n    return json.load(open(path))\n", True),
])
def test_a_data_set_that_decodes_through_helpers_of_other_files_is_a_media_one(
        tmp_path, reader, preview):
    """simple-faster-rcnn's `Dataset` asks a reader class (`voc.py`) that calls
    `read_image` of a file with no torch in it (`util.py`, which no rule walks):
    decoded images, two files away, make pinning worth it."""
    (tmp_path / "util.py").write_text(reader)
    (tmp_path / "voc.py").write_text(
        "from util import read_image\nclass VOCBboxDataset:\n"
        "    def get_example(self, i):\n        return read_image(self.paths[i])\n")
    (tmp_path / "dataset.py").write_text(
        "from voc import VOCBboxDataset\nclass Dataset:\n    def __init__(self, opt):\n"
        "        self.db = VOCBboxDataset(opt)\n"
        "    def __getitem__(self, i):\n        return self.db.get_example(i)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\nfrom dataset import Dataset\n"
        "def train(model, opt):\n"
        "    loader = DataLoader(Dataset(opt), batch_size=8, num_workers=4)\n"
        "    for x in loader:\n        model(x.cuda())\n")
    [finding] = check_paths([str(tmp_path)], jobs=1).findings
    assert (finding.path.endswith("train.py"), finding.code, finding.preview) \
        == (True, "MEM005", preview)


def test_the_media_reading_is_the_same_whichever_files_the_rules_walk(tmp_path):
    """The same chain with the reader class in the file the rules walk: the
    answer comes from the source, so what is selected does not change it."""
    from memlint import Settings

    (tmp_path / "util.py").write_text(
        "from PIL import Image\ndef read_image(path):\n    return Image.open(path)\n")
    (tmp_path / "dataset.py").write_text(
        "from train import Reader\nclass Dataset:\n"
        "    def __getitem__(self, i):\n        return Reader().get(i)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader\nfrom util import read_image\n"
        "from dataset import Dataset\n"
        "class Reader:\n    def get(self, i):\n        return read_image(i)\n"
        "def train(model, opt):\n"
        "    loader = DataLoader(Dataset(opt), batch_size=8, num_workers=4)\n"
        "    for x in loader:\n        model(x.cuda())\n")
    for settings in (Settings(), Settings(select=("MEM005",)), Settings(select=("MEM004",))):
        found = check_paths([str(tmp_path)], settings, jobs=1).findings
        assert [(f.code, f.preview) for f in found if f.code == "MEM005"] \
            == ([("MEM005", False)] if "MEM005" in settings.selected_codes("train.py") else [])


SUMMARY = ("import torch\ndef get_model_summary(model, *input_tensors, verbose=False):\n"
           "    model.eval()\n    model(*input_tensors)\n    return 'summary'\n")


@pytest.mark.parametrize(("caller", "reported"), [
    # HRNet's tools: a model not moved yet, a CPU input: the forward runs on the CPU
    ("model = get_pose_net(cfg)\ndump_input = torch.rand((1, 3, 256, 256))\n"
     "print(get_model_summary(model, dump_input, verbose=True))\n", False),
    ("model = get_pose_net(cfg)\ndump_input = torch.rand((1, 3, 256, 256)).cuda()\n"
     "print(get_model_summary(model, dump_input))\n", True),
    ("model = torch.nn.DataParallel(get_pose_net(cfg))\n"
     "print(get_model_summary(model, torch.rand((1, 3, 256, 256))))\n", True),
    ("print(get_model_summary(model, batch))\n", True),
])
def test_a_helper_whose_callers_hand_it_host_inputs_runs_its_forward_on_the_cpu(
        tmp_path, caller, reported):
    (tmp_path / "utils.py").write_text(SUMMARY)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom utils import get_model_summary\n" + caller
        + "model = torch.nn.DataParallel(model).cuda()\n")  # moved after: a GPU program
    assert codes(tmp_path) == ([("utils.py", 4, "MEM004")] if reported else [])


@pytest.mark.parametrize(("moved", "reported"), [
    ("self.device", False),  # whisper's notebook: the items may be CUDA tensors, unpinnable
    ("torch.float32", True),  # a dtype: host items, copied in the loop, worth pinning
])
def test_a_data_set_that_moves_its_items_to_a_device_gives_no_batches_to_pin(moved, reported):
    source = ("import torch\nfrom torchvision.io import read_image\n"
              "DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
              "class Frames(torch.utils.data.Dataset):\n"
              "    def __init__(self, paths, device=DEVICE):\n"
              "        self.paths, self.device = paths, device\n"
              "    def __getitem__(self, i):\n"
              f"        return read_image(self.paths[i]).to({moved})\n"
              "loader = torch.utils.data.DataLoader(Frames(paths), batch_size=16, num_workers=0)\n"
              "for x in loader:\n    model(x.to(DEVICE))\n")
    found = [f.code for f in check_source(source, "eval.py") if f.code == "MEM005"]
    assert found == (["MEM005"] if reported else [])


RANKS_LOAD = ("import torch\nimport torch.distributed as dist\n"
              "dist.init_process_group('nccl')\n"
              "torch.cuda.set_device(dist.get_rank())\n"
              "model = torch.nn.Linear(2, 2).cuda()\n"
              "model.load_state_dict(torch.load('torch_model.ckpt'))\n")


@pytest.mark.parametrize("saver, preview", [
    ("torch.save(model.state_dict(), 'best.pt')", True),  # the loaded file: written elsewhere
    ("torch.save(model.state_dict(), 'torch_model.ckpt')", False),  # written here, from the GPU
    ("torch.save(model.state_dict(), args.out)", False),  # a save whose file is not shown
    ("trainer.save_model(output_dir=args.out)", True),  # a library's: its own file names
])
def test_a_checkpoint_no_save_of_the_project_writes_is_a_preview_variant(
        tmp_path, saver, preview):
    """TimesFM's published checkpoint, an `optimizer.pt` no script writes: the
    device its tensors were saved from is not in the code."""
    from memlint import Settings

    (tmp_path / "evaluate.py").write_text(RANKS_LOAD)
    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n" + saver + "\n")
    found = [f for f in check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
             if f.code == "MEM007"]
    assert [(Path(f.path).name, f.line, f.preview) for f in found] == \
        [("evaluate.py", 6, preview)]


@pytest.mark.parametrize("saver_folder, preview", [
    ("task_b", True),  # another task of a collection: a separate program
    ("task_a", False),  # a script beside the loader
    ("task_a/tools", False),  # a folder below the loader's
    ("", False),  # a folder above it
])
def test_only_the_loaders_program_writes_its_files(tmp_path, saver_folder, preview):
    """CodeXGLUE: `Defect-detection/code/run.py` resumes an `optimizer.pt`
    that only `CodeCompletion/code/run_lm.py`, another task's script, writes;
    the file the loader reads is not that one."""
    from memlint import Settings

    (tmp_path / "task_a").mkdir()
    (tmp_path / "task_a" / "run.py").write_text(RANKS_LOAD)
    (tmp_path / saver_folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / saver_folder / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
        "torch.save(model.state_dict(), 'torch_model.ckpt')\n")
    found = [f for f in check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
             if f.code == "MEM007"]
    assert [(Path(f.path).name, f.line, f.preview) for f in found] == [("run.py", 6, preview)]


def test_another_programs_save_from_the_cpu_does_not_clear_a_load(tmp_path):
    """A file of the same name saved from CPU values by another task's script
    says nothing of what this task's own save (to a path it does not spell)
    put in it."""
    from memlint import Settings

    for task, saved in (("task_a", "model.state_dict(), args.out"),
                        ("task_b", "args, 'best.pt'")):
        (tmp_path / task).mkdir()
        (tmp_path / task / "train.py").write_text(
            "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
            f"torch.save({saved})\n")
    (tmp_path / "task_a" / "evaluate.py").write_text(RANKS_LOAD.replace("torch_model.ckpt",
                                                                        "best.pt"))
    found = [f for f in check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
             if f.code == "MEM007"]
    assert [(Path(f.path).name, f.preview) for f in found] == [("evaluate.py", False)]


@pytest.mark.parametrize("loaded, preview", [
    ("adapter_model.bin", False),  # written by the Trainer from the GPU model
    ("torch_model.ckpt", True),  # no save of the project, nor of a library, writes it
])
def test_a_librarys_save_writes_the_files_it_names(tmp_path, loaded, preview):
    """LETTER resumes the `adapter_model.bin` that `trainer.save_model()`
    wrote; TimesFM's published `torch_model.ckpt` is written by no one here."""
    from memlint import Settings

    (tmp_path / "finetune.py").write_text(
        RANKS_LOAD.replace("torch_model.ckpt", loaded) + "trainer.save_model(args.out)\n")
    found = [f for f in check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
             if f.code == "MEM007"]
    assert [(Path(f.path).name, f.line, f.preview) for f in found] == \
        [("finetune.py", 6, preview)]


@pytest.mark.parametrize("caller, preview", [
    ("from utils import *\nevaluate(net, batches)\n", False),  # run through a star import
    ("import utils\n", True),  # nothing runs it
])
def test_a_function_named_for_inference_needs_a_caller(tmp_path, caller, preview):
    """`evaluate_model` in `utils.py`, named for inference with no `eval()`,
    is the rule's own finding where a script runs it with grad on, also
    after `from utils import *` (Text-Classification-Models-Pytorch); with no
    caller, a preview variant."""
    from memlint import Settings

    (tmp_path / "utils.py").write_text(
        "import torch\n\ndef evaluate(model, batches):\n"
        "    return [model(x.cuda()).argmax(1) for x in batches]\n")
    (tmp_path / "main.py").write_text(
        "import torch\nnet = torch.nn.Linear(2, 2).cuda()\nbatches = [torch.zeros(1, 2)]\n"
        + caller)
    found = [f for f in check_paths([str(tmp_path)], Settings(preview=True), jobs=1).findings
             if f.code == "MEM004"]
    assert [(Path(f.path).name, f.preview) for f in found] == [("utils.py", preview)]
