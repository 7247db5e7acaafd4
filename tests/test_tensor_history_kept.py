"""MEM003 across files: what an imported helper returns is settled with the
project's facts, and a project that never uses CUDA keeps no GPU memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint import Settings, check_paths, check_source

ONLY_MEM003 = Settings(select=("MEM003",))

TRAIN = ("import torch\nfrom .losses import compute_loss\n\n"
         "model = torch.nn.Linear(4, 1).cuda()\ntotal = 0.0\n"
         "for x, y in loader:\n    total += compute_loss(model(x), y)\n")


def _package(tmp_path: Path, losses: str) -> Path:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "losses.py").write_text(losses)
    (package / "train.py").write_text(TRAIN)
    return package


def _losses(returned: str) -> str:
    """A helper module (with a loop: MEM003 only walks files that have one)."""
    return ("import torch\ncriterion = torch.nn.MSELoss()\n\n"
            f"def compute_loss(out, y):\n    return {returned}\n\n"
            "def terms(out, ys):\n    return [criterion(out, y).item() for y in ys]\n")


def findings(*paths: Path) -> list[tuple[str, int]]:
    report = check_paths([str(p) for p in paths], ONLY_MEM003, jobs=1)
    return [(Path(f.path).name, f.line) for f in report.findings]


def test_an_imported_helper_named_like_a_loss_that_returns_a_float_is_not_a_loss(tmp_path):
    _package(tmp_path, _losses("criterion(out, y).item()"))
    assert findings(tmp_path) == []


def test_an_imported_helper_that_returns_the_loss_tensor_is_reported(tmp_path):
    _package(tmp_path, _losses("criterion(out, y)"))
    assert findings(tmp_path) == [("train.py", 7)]


def test_checked_alone_the_importer_goes_by_the_helper_name(tmp_path):
    package = _package(tmp_path, _losses("criterion(out, y).item()"))
    assert [f.line for f in check_source(TRAIN, str(package / "train.py"), ONLY_MEM003)] == [7]


def test_a_project_that_never_uses_cuda_is_not_reported(tmp_path):
    (tmp_path / "cpu_train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(4, 1)\ncriterion = torch.nn.MSELoss()\n"
        "losses = []\nfor x, y in batches:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    losses.append(loss)\n")
    assert findings(tmp_path) == []
    (tmp_path / "cpu_train.py").write_text(
        (tmp_path / "cpu_train.py").read_text().replace("Linear(4, 1)", "Linear(4, 1).cuda()"))
    assert findings(tmp_path) == [("cpu_train.py", 8)]


_KEPT = ("import torch\ndevice = 'cuda'\n{built}\n{placed}\ntotal = 0\n"
         "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
         "    total += loss\n    loss.backward()\n")


def _kept(built: str, placed: str = "") -> bool:
    source = _KEPT.format(built=built, placed=placed)
    return [f.line for f in check_source(source, "train.py", ONLY_MEM003)] == [8]





@pytest.mark.parametrize("built, placed, reported", [
    ("model = torch.nn.Linear(4, 1)", "", False),                      # built here, never moved
    ("model = torch.nn.Linear(4, 1)", "model.to('cpu')", False),       # put on the CPU
    ("model = torch.nn.Linear(4, 1).cpu()", "", False),
    ("model = torch.nn.Linear(4, 1)", "model.to(torch.float64)", False),  # a dtype: not a move
    ("model = torch.nn.Linear(4, 1)", "model.cuda()", True),
    ("model = torch.nn.Linear(4, 1)", "model.to(device)", True),
    ("model = torch.nn.Linear(4, 1).to(device)", "", True),
    ("model = torch.nn.Linear(4, 1).cuda()", "model.to('cpu')", False),  # the last move counts
    ("model = torch.nn.Linear(4, 1, device='cuda')", "", True),
    ("model = torch.nn.Linear(4, 1)", "model.to(some_device)", True),   # cannot tell: checked
    ("model = load_model(path)", "", True),                             # made elsewhere
])
def test_history_kept_by_a_model_on_the_cpu_is_host_memory(built, placed, reported):
    assert _kept(built, placed) is reported


def test_a_model_handed_in_is_checked_wherever_it_was_built():
    source = ("import torch\ndef fit(model, loader):\n    total = 0\n    for x, y in loader:\n"
              "        loss = torch.nn.functional.mse_loss(model(x), y)\n        total += loss\n"
              "        loss.backward()\n    return total\n"
              "net = torch.nn.Linear(4, 1).cuda()\n")
    assert [f.line for f in check_source(source, "train.py", ONLY_MEM003)] == [6]


#: LMSCNet's loss tracker: what `update_train_losses` is handed stays on the object
TRACKER = ("import torch\n\nclass LossesTracker:\n    def __init__(self):\n"
           "        self.train_losses = {}\n\n    def update_train_losses(self, loss):\n"
           "        for key in loss:\n            self.train_losses[key] += loss[key]\n")


@pytest.mark.parametrize("handed, reported", [
    ("loss", True),  # the dict whose total was just back-propagated
    ("{k: v.item() for k, v in loss.items()}", False),  # numbers
    ("numbers", False),
])
def test_a_method_keeping_what_training_steps_hand_it_is_reported(tmp_path, handed, reported):
    """The tracker's file cannot tell what it is handed; the training loop's file can."""
    (tmp_path / "metrics.py").write_text(TRACKER)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom metrics import LossesTracker\ntracker = LossesTracker()\n"
        "model = torch.nn.Linear(4, 1).cuda()\nnumbers = {'total': 0.0}\n"
        "for x, y in loader:\n    loss = {'total': ((model(x.cuda()) - y) ** 2).mean()}\n"
        "    loss['total'].backward()\n"
        f"    tracker.update_train_losses({handed})\n")
    found = check_paths([str(tmp_path)], ONLY_MEM003, jobs=1).findings
    assert [(Path(f.path).name, f.line) for f in found] == \
        ([("metrics.py", 9)] if reported else [])
    if reported:
        assert [(Path(r.path).name, r.line) for r in found[0].related] == [("train.py", 9)]


def test_a_method_keeping_what_no_caller_hands_it_with_history_is_left_alone(tmp_path):
    (tmp_path / "metrics.py").write_text(TRACKER)
    assert check_paths([str(tmp_path)], ONLY_MEM003, jobs=1).findings == []


@pytest.mark.parametrize(("backward", "freed"), [
    ("loss.backward()", True),
    ("scaler.scale(loss).backward()", True),
    ("loss.backward(retain_graph=True)", False),
    ("other.backward()", False),
])
def test_the_message_names_what_a_graph_kept_after_its_backward_holds(backward, freed):
    """After the kept loss's own backward, the saved tensors are gone and only
    the graph's nodes stay: the message says which cost applies."""
    source = ("import torch\nmodel = torch.nn.Linear(4, 1).cuda()\nloss_sum = 0\n"
              "for x, y in loader:\n    loss = (model(x.cuda()) - y.cuda()).pow(2).mean()\n"
              "    other = loss * 2\n"
              f"    {backward}\n    loss_sum += len(x) * loss\n")
    [finding] = check_source(source, "train.py", ONLY_MEM003)
    assert ("its backward freed the tensors each graph saved" in finding.message) is freed
    assert ("the tensors it saved for backward stay in memory" in finding.message) is not freed


@pytest.mark.parametrize(("kept", "reported"), [
    ("flat_loss.item() if task != 0 else flat_loss", False),
    ("float(flat_loss) if task != 0 else flat_loss", False),
    ("flat_loss if task == 0 else flat_loss.item()", False),
    ("loss if task != 0 else flat_loss.item()", True),
])
def test_a_term_made_a_number_on_one_branch_is_a_number_on_the_other(kept, reported):
    """`x.item() if c else x`: the code converts the term where it is a tensor,
    so the branch that keeps it whole is where it is still the float 0.0."""
    source = ("import torch\nmodel = torch.nn.Linear(4, 1).cuda()\ntotal = 0.0\n"
              "for x, y in loader:\n    flat_loss = 0.0\n    if old is not None:\n"
              "        flat_loss = model(x.cuda()).mean()\n"
              "    loss = model(x.cuda()).mean() + flat_loss\n    loss.backward()\n"
              f"    total += {kept}\n")
    assert bool(check_source(source, "train.py", ONLY_MEM003)) is reported


ROLLOUT = ("import torch\nmodel = torch.nn.Linear(4, 4).cuda()\n{start}"
           "for xx, yy in train_loader:\n    loss = 0\n    xx = xx.to('cuda')\n"
           "    yy = yy.to('cuda')\n{per_batch}"
           "    for t in range(initial_step, t_train):\n        im = model(xx)\n{body}"
           "        xx = torch.cat((xx[..., 1:], im), dim=-2)\n"
           "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n")
LOSS, CAT = ("        loss += loss_fn(im, yy[..., t])\n",
             "        pred = torch.cat((pred, im), -2)\n")


@pytest.mark.parametrize(("start", "per_batch", "body", "reported"), [
    ("", "    pred = yy[..., :1]\n", LOSS + CAT, False),  # PDEBench's rollout
    ("", "    pred = yy[..., :1]\n", CAT + LOSS, False),
    ("", "    pred = yy[..., :1]\n", CAT, True),  # what it keeps no backward needs
    ("pred = None\n", "", LOSS + CAT, True),  # one rollout chained onto the last
])
def test_a_rollout_made_afresh_every_batch_keeps_one_step_of_graph(start, per_batch, body,
                                                                   reported):
    """`pred` is made afresh every batch and keeps predictions the batch's
    loss runs through: the step's backward needs that graph anyway."""
    source = ROLLOUT.format(start=start, per_batch=per_batch, body=body)
    assert [f.line for f in check_source(source, "train.py", ONLY_MEM003)
            if "'pred'" in f.message] == ([source.splitlines().index(CAT.rstrip("\n")) + 1]
                                          if reported else [])


def test_a_concatenation_over_the_batches_of_an_epoch_is_still_reported():
    source = ("import torch\nmodel = torch.nn.Linear(4, 4).cuda()\nfor epoch in range(10):\n"
              "    outs = torch.zeros(0, 4).cuda()\n    for x, y in loader:\n"
              "        out = model(x.cuda())\n        loss = crit(out, y)\n"
              "        loss.backward()\n        outs = torch.cat((outs, out))\n")
    assert [f.line for f in check_source(source, "train.py", ONLY_MEM003)] == [9]


@pytest.mark.parametrize(("log", "reported"), [
    ("    for idx, (key, value) in enumerate(loss_dict.items()):\n"
     "        loss_dict[key] = value.item()\n", False),  # DBNet's log
    ("    for key, value in loss_dict.items():\n        loss_dict[key] = float(value)\n", False),
    ("    for key, value in other.items():\n        loss_dict[key] = value.item()\n", True),
    ("    for key, value in loss_dict.items():\n        print(key, value.item())\n", True),
])
def test_a_dict_whose_every_item_was_made_a_number_keeps_no_graph(log, reported):
    source = ("import torch\nmodel = torch.nn.Linear(4, 1).cuda()\ntrain_loss = 0.0\n"
              "for x, y in loader:\n    loss_dict = criterion(model(x.cuda()), y)\n"
              "    loss_dict['loss'].backward()\n" + log
              + "    train_loss += loss_dict['loss']\n")
    assert bool(check_source(source, "train.py", ONLY_MEM003)) is reported


RESET_ON_FIRST = ("import torch\nmodel = torch.nn.Linear(4, 4).cuda()\nfor ep in range(10):\n"
                  "    for {target} in {loop}:\n        loss = 0\n"
                  "        for t in range(0, T, step):\n"
                  "            im = model(x.cuda())\n            loss += crit(im, y.cuda())\n"
                  "            if {first} == 0:\n                pred = im\n            else:\n"
                  "                pred = torch.cat((pred, im), -1)\n"
                  "        loss.backward()\n")


@pytest.mark.parametrize(("target", "loop", "first", "reported"), [
    ("x, y", "train_loader", "t", False),  # Transolver: made afresh at t == 0, per batch
    ("i, (x, y)", "enumerate(train_loader)", "i", True),  # once per epoch: grows over batches
])
def test_a_container_made_at_the_first_iteration_lives_one_run_of_that_loop(
        target, loop, first, reported):
    source = RESET_ON_FIRST.format(target=target, loop=loop, first=first)
    assert bool([f for f in check_source(source, "train.py", ONLY_MEM003)
                 if "'pred'" in f.message]) is reported
