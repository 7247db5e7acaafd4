"""`memlint check --fix / --unsafe-fixes / --diff`: what each rule's fix writes,
which fixes are safe, and that no file is ever corrupted (encodings, line
endings, read-only files, stdin, a file that changes during the run)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import libcst as cst
import pytest

from memlint import check_source
from memlint.engine.fixes import FileChanged, apply_fixes, fix_text, write_fixed
from memlint.finding import SAFE, UNSAFE
from tests.cli_helpers import check, write

LOAD = ('import torch\nmodel = Net().cuda()\n'
        'model.load_state_dict(torch.load("best.pt"))\n')
LOAD_FIXED = ('import torch\nmodel = Net().cuda()\n'
              'model.load_state_dict(torch.load("best.pt", map_location="cpu"))\n')


def fixes(source: str) -> list:
    return [(f.code, f.fix.applicability, f.fix.edits[0].content if f.fix.edits else "")
            for f in check_source(source, "train.py") if f.fix is not None]


# -- what each rule offers --------------------------------------------------

def test_map_location_is_safe_when_the_load_goes_into_load_state_dict():
    assert fixes(LOAD) == [("MEM007", SAFE, 'torch.load("best.pt", map_location="cpu")')]


def test_map_location_is_unsafe_when_the_loaded_object_is_used_otherwise():
    source = 'import torch\nmodel = Net().cuda()\nstate = torch.load(p)\nprint(state)\n'
    assert fixes(source) == [("MEM007", UNSAFE, 'torch.load(p, map_location="cpu")')]


def test_a_call_laid_out_one_argument_per_line_keeps_its_layout():
    source = ('import torch\nmodel = Net().cuda()\nmodel.load_state_dict(torch.load(\n'
              '    path,\n))\n')
    (_, _, content), = fixes(source)
    assert content == 'torch.load(\n    path,\n    map_location="cpu",\n)'


def test_continuation_lines_inside_a_block_keep_their_indentation():
    """MaskCycleGAN-VC's loader, built in a method over four aligned lines."""
    source = ("import torch\nclass Tester:\n    def __init__(self, ds):\n"
              "        self.loader = torch.utils.data.DataLoader(dataset=ds,\n"
              "                                                  batch_size=1)\n"
              "    def run(self):\n        for x in self.loader:\n            x.cuda()\n")
    finding, = check_source(source, "t.py")
    fixed, _, _ = apply_fixes(source, [finding])
    assert fixed == source.replace("batch_size=1)", "batch_size=1, pin_memory=True)")


def test_pin_memory_follows_a_device_picked_at_run_time():
    """A program that may run on a host without CUDA must not warn there
    (current torch warns on every run when pin_memory=True has no accelerator)."""
    source = ("import torch as T\nfrom torch.utils.data import DataLoader\n"
              "from torchvision.datasets import MNIST\n"
              "device = 'cuda' if T.cuda.is_available() else 'cpu'\n"
              "loader = DataLoader(MNIST('.'), batch_size=64)\n"
              "for x, y in loader:\n    x = x.to(device)\n")
    assert fixes(source) == [
        ("MEM005", SAFE, "DataLoader(MNIST('.'), batch_size=64, "
                         "pin_memory=T.cuda.is_available())")]


def test_pin_memory_is_safe_for_host_datasets_and_unsafe_for_the_projects_own():
    torchvision_loader = ("import torch\nfrom torch.utils.data import DataLoader\n"
                          "from torchvision.datasets import MNIST\n"
                          "loader = DataLoader(MNIST('.'), batch_size=64)\n"
                          "for x, y in loader:\n    x = x.cuda()\n")
    own_loader = torchvision_loader.replace("MNIST('.')", "Frames()")
    assert fixes(torchvision_loader) == [
        ("MEM005", SAFE, "DataLoader(MNIST('.'), batch_size=64, pin_memory=True)")]
    assert fixes(own_loader)[0][:2] == ("MEM005", UNSAFE)


TENSOR_DATASET = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                  "device = torch.device('cuda')\n"
                  "train_ds = TensorDataset(X_train.to(device), y_train.cuda().float())\n"
                  "loader = DataLoader(train_ds, batch_size=64)\n"
                  "for epoch in range(3):\n"
                  "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n")


def test_a_tensor_dataset_is_built_on_the_host_when_its_loop_moves_each_batch():
    assert fixes(TENSOR_DATASET) == [
        ("MEM001", UNSAFE, "TensorDataset(X_train, y_train.float())")]


def test_a_tensor_dataset_inside_its_loader_and_batches_unpacked_in_the_loop():
    source = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
              "loader = DataLoader(TensorDataset(X_train.cuda(0)), batch_size=64)\n"
              "for i, batch in enumerate(loader):\n    inputs, = batch\n"
              "    inputs = inputs.cuda()\n")
    assert fixes(source) == [("MEM001", UNSAFE, "TensorDataset(X_train)")]


@pytest.mark.parametrize("old, new, reason", [
    ("x, y = x.to(device), y.to(device)", "out = model(x)",
     "the loop uses the batches where they are"),
    ("X_train.to(device)", "X_train.to(device, torch.half)", "a dtype change rides on the move"),
    ("in loader:", "in other_loader:", "no loop over the loader"),
])
def test_no_host_dataset_fix_where_dropping_the_move_changes_more(old, new, reason):
    source = TENSOR_DATASET.replace(old, new)
    assert "MEM001" in {f.code for f in check_source(source, "train.py")}
    assert [f for f in fixes(source) if f[0] == "MEM001"] == [], reason


def test_pin_memory_false_given_by_position_is_turned_true_in_place():
    source = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
              "loader = DataLoader(TensorDataset(a), 64, True, None, None, 4, None, False)\n"
              "for (x,) in loader:\n    x = x.cuda()\n")
    (_, _, content), = fixes(source)
    assert content.endswith("4, None, True)")


def test_no_grad_decorator_is_unsafe_and_goes_right_above_the_def():
    source = ("import torch\nclass Runner:\n    @staticmethod\n    def evaluate(model, x):\n"
              "        model.eval()\n        return model(x.cuda())\n")
    (code, applicability, content), = fixes(source)
    assert (code, applicability, content) == ("MEM004", UNSAFE, "@torch.no_grad()\n    ")
    finding, = check_source(source, "train.py")
    fixed, _, _ = apply_fixes(source, [finding])
    assert "    @staticmethod\n    @torch.no_grad()\n    def evaluate" in fixed


@pytest.mark.parametrize("source, reason", [
    ("import torch as T\ndef evaluate(model, x):\n    model.eval()\n    return model(x.cuda())\n",
     "torch is not imported as torch"),
    ("import torch\nasync def evaluate(model, x):\n    model.eval()\n    return model(x.cuda())\n",
     "a coroutine"),
    ("import torch\nmodel = Net().cuda()\nmodel.eval()\nout = model(x)\n", "top level"),
])
def test_no_decorator_is_offered_where_it_would_not_work(source, reason):
    assert [f.fix for f in check_source(source, "train.py") if f.code == "MEM004"] == [None], reason


def test_detach_is_safe_for_a_local_list_and_unsafe_for_one_that_leaves_the_function():
    local = ("import torch\ndef fit(model, loader):\n    losses = []\n"
             "    for x, y in loader:\n        loss = criterion(model(x), y)\n"
             "        loss.backward()\n        losses.append(loss)\n"
             "    print(torch.stack(losses).mean())\n")
    returned = local.replace("    print(torch.stack(losses).mean())\n", "    return losses\n")
    assert fixes(local) == [("MEM003", SAFE, "loss.detach()")]
    assert fixes(returned) == [("MEM003", UNSAFE, "loss.detach()")]


def test_an_expression_is_parenthesised_before_detach():
    source = ("import torch\ndef fit(model, loader):\n    total = []\n"
              "    for x, y in loader:\n        loss = criterion(model(x), y)\n"
              "        loss.backward()\n        total.append(loss * x.size(0))\n"
              "    print(sum(total))\n")
    assert fixes(source) == [("MEM003", SAFE, "(loss * x.size(0)).detach()")]


# -- applying them ----------------------------------------------------------

def test_fixing_is_idempotent_and_the_fixed_findings_are_gone():
    result = fix_text(LOAD, check_source(LOAD, "t.py"), unsafe=True,
                      recheck=lambda text: check_source(text, "t.py"))
    assert result.text == LOAD_FIXED and len(result.fixed) == 1
    again = fix_text(result.text, check_source(result.text, "t.py"), unsafe=True,
                     recheck=lambda text: check_source(text, "t.py"))
    assert not again.changed and check_source(result.text, "t.py") == []


def test_overlapping_fixes_are_taken_on_a_later_pass():
    source = ("import torch\nmodel = Net().cuda()\n"
              "model.load_state_dict(torch.load(torch.load(a)))\n")
    findings = check_source(source, "t.py")
    assert len(findings) == 2
    result = fix_text(source, findings, unsafe=True,
                      recheck=lambda text: check_source(text, "t.py"))
    assert result.text.count('map_location="cpu"') == 2 and len(result.fixed) == 2
    cst.parse_module(result.text)


def test_a_waiting_fix_is_found_again_after_an_earlier_fix_moved_its_line():
    """The decorator inserted above the function moves the nested load a
    line down; the load that waited for the overlap is still fixed."""
    source = ("import torch\ndef evaluate(model, x):\n    model.eval()\n"
              "    out = model(x.cuda())\n"
              "    model.load_state_dict(torch.load(torch.load(a)))\n    return out\n")
    result = fix_text(source, check_source(source, "t.py"), unsafe=True,
                      recheck=lambda text: check_source(text, "t.py"))
    assert "@torch.no_grad()\ndef evaluate" in result.text
    assert result.text.count('map_location="cpu"') == 2 and len(result.fixed) == 3


def test_a_fix_that_would_not_parse_is_not_applied():
    finding, = check_source(LOAD, "t.py")
    broken = finding.fix.edits[0].__class__(3, 23, 3, 44, "torch.load((")
    bad = type(finding)(**{**finding.__dict__, "fix": finding.fix.__class__(
        SAFE, "broken", (broken,))})
    result = fix_text(LOAD, [bad], unsafe=False, recheck=lambda text: [])
    assert result.text == LOAD and not result.changed


@pytest.mark.parametrize("data", [
    LOAD.replace("\n", "\r\n").encode(),  # Windows line endings stay
    b"\xef\xbb\xbf" + LOAD.encode(),  # a UTF-8 byte order mark stays
    ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + LOAD).encode("latin-1"),  # so does latin-1
])
def test_fix_keeps_line_endings_bom_and_encoding(tmp_path, capsys, data):
    path = tmp_path / "train.py"
    path.write_bytes(data)
    code, _, _ = check(capsys, "--fix", str(path))
    fixed = path.read_bytes()
    assert code == 0
    assert fixed.startswith(data[:3]) and fixed.count(b"\r\n") == data.count(b"\r\n")
    assert b'map_location="cpu"' in fixed
    assert fixed.replace(b', map_location="cpu"', b"") == data


def test_fix_keeps_the_file_mode(tmp_path, capsys):
    path = write(tmp_path / "train.py", LOAD)
    path.chmod(0o750)
    check(capsys, "--fix", str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o750 and path.read_text() == LOAD_FIXED


def test_a_read_only_file_is_not_fixed_and_says_why(tmp_path, capsys):
    path = write(tmp_path / "train.py", LOAD)
    path.chmod(0o444)
    try:
        code, out, err = check(capsys, "--fix", str(path))
    finally:
        path.chmod(0o644)
    assert path.read_text() == LOAD
    assert "read-only" in err and code == 1 and "MEM007" in out


def test_a_file_that_changed_since_it_was_read_is_not_overwritten(tmp_path):
    path = write(tmp_path / "train.py", LOAD)
    original = path.read_bytes()
    path.write_text(LOAD + "# edited meanwhile\n")
    with pytest.raises(FileChanged):
        write_fixed(str(path), original, LOAD_FIXED)
    assert path.read_text().endswith("# edited meanwhile\n")
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary left


def test_diff_prints_what_fix_would_change_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path / "train.py", LOAD)
    code, out, err = check(capsys, "--diff", str(path))
    assert code == 1 and path.read_text() == LOAD
    assert '-model.load_state_dict(torch.load("best.pt"))' in out
    assert '+model.load_state_dict(torch.load("best.pt", map_location="cpu"))' in out
    assert "Would fix 1 finding." in err
    write(path, LOAD_FIXED)
    assert check(capsys, "--diff", str(path))[0] == 0


EXPOSES_ANOTHER = ("import torch\n\nmodel = Net().cuda()\npredictions = []\n"
                   "for x, y in loader:\n    out = model(x.cuda())\n"
                   "    predictions.append(out)\n"
                   "torch.save(torch.cat(predictions), 'preds.pt')\n")


def test_fix_reaches_a_fixed_point_in_one_run(tmp_path, capsys):
    """MEM003's `.detach()` exposes a MEM010 (the detached output still on the
    GPU), whose `.cpu()` one run applies too; a second run changes nothing."""
    path = write(tmp_path / "evaluate.py", EXPOSES_ANOTHER)
    code, out, err = check(capsys, "--fix", "--unsafe-fixes", str(path))
    assert (code, out, err) == (0, "Fixed 2 findings; none left.\n", "")
    assert "predictions.append(out.detach().cpu())" in path.read_text()
    assert check(capsys, "--fix", "--unsafe-fixes", str(path))[1] == "All checks passed!\n"


def test_diff_shows_the_fixed_point_that_fix_writes(tmp_path, capsys):
    path = write(tmp_path / "evaluate.py", EXPOSES_ANOTHER)
    code, out, err = check(capsys, "--diff", "--unsafe-fixes", str(path))
    assert code == 1 and "+    predictions.append(out.detach().cpu())\n" in out
    assert err == "Would fix 2 findings.\n" and path.read_text() == EXPOSES_ANOTHER


def test_fixes_that_do_not_settle_within_the_cap_say_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("memlint.cli.main.MAX_FIX_ROUNDS", 1)
    path = write(tmp_path / "evaluate.py", EXPOSES_ANOTHER)
    code, out, err = check(capsys, "--fix", "--unsafe-fixes", str(path))
    assert code == 1 and "MEM010" in out
    assert err == ("memlint: fixes did not settle after 1 rounds (each exposed another); "
                   "review the changes and run --fix again\n")


def test_unsafe_fixes_wait_for_the_flag(tmp_path, capsys):
    source = 'import torch\nmodel = Net().cuda()\nstate = torch.load(p)\nprint(state)\n'
    path = write(tmp_path / "train.py", source)
    code, out, _ = check(capsys, "--fix", str(path))
    assert code == 1 and path.read_text() == source
    assert out.endswith("Found 1 finding (1 more with --fix --unsafe-fixes).\n")
    code, out, _ = check(capsys, "--fix", "--unsafe-fixes", str(path))
    assert code == 0 and 'map_location="cpu"' in path.read_text()
    assert out == "Fixed 1 finding; none left.\n"


def test_fix_on_stdin_writes_the_fixed_source_to_stdout():
    result = subprocess.run([sys.executable, "-m", "memlint", "check", "--fix", "-"],
                            input=LOAD.encode(), capture_output=True, check=False)
    assert result.returncode == 0 and result.stdout.decode() == LOAD_FIXED


def _notebook(*cells: str | list[str], indent=1) -> str:
    """A notebook of code cells (a string, or a list of lines as Jupyter
    writes them) with a markdown cell first and outputs on every code cell."""
    import json
    code = [{"cell_type": "code", "execution_count": 3, "metadata": {"tags": ["keep"]},
             "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok \u00e9\n"]}],
             "source": source} for source in cells]
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Résumé"]},
                          *code],
                "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=indent, ensure_ascii=False) + "\n"


def test_a_notebook_is_fixed_cell_by_cell_outputs_metadata_and_layout_kept(tmp_path, capsys):
    import json
    first = ["import torch\n", "model = Net().cuda()\n"]
    second = ["%time x = 1\n", 'model.load_state_dict(torch.load("best.pt"))']
    text = _notebook(first, second)
    path = tmp_path / "nb.ipynb"
    path.write_text(text, encoding="utf-8")
    code, out, _ = check(capsys, "--fix", "--format", "json", str(path))
    assert code == 0 and json.loads(out) == []
    fixed = path.read_text(encoding="utf-8")
    expected = json.loads(text)
    expected["cells"][2]["source"][1] = \
        'model.load_state_dict(torch.load("best.pt", map_location="cpu"))'
    assert fixed == json.dumps(expected, indent=1, ensure_ascii=False) + "\n"
    check(capsys, "--fix", str(path))
    assert path.read_text(encoding="utf-8") == fixed  # a second run changes nothing


def test_a_notebook_fix_reports_edits_in_the_cells_lines(tmp_path, capsys):
    import json
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook("x = 1", LOAD), encoding="utf-8")
    _, out, _ = check(capsys, "--format", "json", str(path))
    finding, = json.loads(out)
    edit, = finding["fix"]["edits"]
    assert (finding["cell"], edit["line"]) == (3, 3)


def test_a_notebook_diff_shows_the_changed_cell_not_its_json(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    text = _notebook("x = 1", LOAD)
    path.write_text(text, encoding="utf-8")
    code, out, _ = check(capsys, "--diff", str(path))
    assert code == 1 and path.read_text(encoding="utf-8") == text
    assert f"--- {path}:cell 3" in out and '+model.load_state_dict(torch.load("best.pt", ' \
        'map_location="cpu"))' in out and "outputs" not in out


def _patched(tmp_path, text: str, diff: str) -> str:
    """`text` after GNU patch applies `diff` to it (whatever file the diff names)."""
    target = tmp_path / "target"
    target.write_bytes(text.encode())
    done = subprocess.run(["patch", "--quiet", "--force", str(target)], input=diff.encode(),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return target.read_bytes().decode()


@pytest.mark.skipif(not shutil.which("patch") or not shutil.which("git"),
                    reason="needs patch and git")
def test_a_diff_of_a_file_without_a_final_newline_applies_with_patch_and_git(
        tmp_path, capsys, monkeypatch):
    source = "x = 1\x0c  # a form feed is no line break\n" + LOAD.rstrip("\n")
    path = write(tmp_path / "train.py", source)
    monkeypatch.chdir(tmp_path)
    diff = check(capsys, "--diff", "train.py")[1]
    assert diff.endswith('map_location="cpu"))\n\\ No newline at end of file\n')
    check(capsys, "--fix", "train.py")
    fixed = path.read_text()
    assert _patched(tmp_path, source, diff) == fixed
    path.write_text(source)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    applied = subprocess.run(["git", "apply", "-p0", "-"], cwd=tmp_path, input=diff.encode(),
                             capture_output=True, timeout=60, check=False)
    assert applied.returncode == 0, applied.stderr
    assert path.read_text() == fixed


@pytest.mark.skipif(not shutil.which("patch"), reason="needs patch")
def test_a_notebook_cell_diff_applies_to_the_cells_code(tmp_path, capsys):
    """A cell's last line has no line break: the diff marks it instead of
    running it into the next line (or the next cell's header)."""
    import json
    cells = (LOAD.rstrip("\n"), "x = 2\n" + LOAD.rstrip("\n"))
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook(*cells), encoding="utf-8")
    diff = check(capsys, "--diff", str(path))[1]
    parts = [f"--- {path}:cell " + part for part in diff.split(f"--- {path}:cell ")[1:]]
    assert len(parts) == 2
    assert all(part.count("\n\\ No newline at end of file\n") == 2 for part in parts)
    check(capsys, "--fix", str(path))
    fixed = json.loads(path.read_text(encoding="utf-8"))["cells"][1:]
    for part, before, after in zip(parts, cells, fixed):
        assert _patched(tmp_path, before, part) == "".join(after["source"])


def test_a_notebook_whose_layout_cannot_be_written_back_is_left_alone(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    text = _notebook(LOAD).replace('"nbformat": 4', '"nbformat":   4')
    path.write_text(text, encoding="utf-8")
    code, _, err = check(capsys, "--fix", str(path))
    assert code == 1 and path.read_text(encoding="utf-8") == text
    assert "not fixed: its JSON layout" in err


def test_no_notebook_fix_where_the_checker_read_the_line_differently():
    """A cell indented as a whole is read without its indentation: the
    edit's columns would not be the cell's, so no fix is offered there."""
    from memlint.engine.notebook import check_notebook_source
    indented = "  " + LOAD.replace("\n", "\n  ").rstrip(" ")
    finding, = check_notebook_source(_notebook(indented), "nb.ipynb")
    assert finding.code == "MEM007" and finding.fix is None


def test_json_and_sarif_carry_the_fix(tmp_path, capsys):
    import json
    path = write(tmp_path / "train.py", LOAD)
    _, out, _ = check(capsys, "--format", "json", str(path))
    fix = json.loads(out)[0]["fix"]
    assert fix == {"applicability": "safe", "message": 'add map_location="cpu"', "edits": [
        {"line": 3, "column": 23, "end_line": 3, "end_column": 44,
         "content": 'torch.load("best.pt", map_location="cpu")'}]}
    _, out, _ = check(capsys, "--format", "sarif", str(path))
    replacement = json.loads(out)["runs"][0]["results"][0]["fixes"][0]["artifactChanges"][0][
        "replacements"][0]
    assert replacement == {"deletedRegion": {"startLine": 3, "startColumn": 23, "endLine": 3,
                                             "endColumn": 44},
                           "insertedContent": {"text": 'torch.load("best.pt", map_location="cpu")'}}
    assert os.path.exists(path)
