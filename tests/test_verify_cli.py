"""`memlint verify`'s command line: sizes, `--` arguments, exit status 2
with one line when no CUDA device is usable."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from memlint.verify.cli import _per_script, build_parser, main, parse_size


@pytest.mark.parametrize("text, size", [("1048576", 2**20), ("512KiB", 512 * 1024),
                                        ("1.5 GiB", int(1.5 * 2**30)), ("10MB", 10**7),
                                        ("0", 0)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1MiB", "5 parsecs"])
def test_parse_size_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_defaults_follow_the_contract():
    options = build_parser().parse_args(["train.py"])
    assert (options.timeout, options.min_bytes, options.device, options.format) == \
        (120.0, 2**20, "cuda:0", "text")


def test_outputs_get_the_script_name_when_there_are_several():
    assert _per_script("out.png", "fixtures/a/train.py", several=False) == "out.png"
    assert _per_script("out.png", "fixtures/a/train.py", several=True) == "out.train.png"
    assert _per_script(None, "train.py", several=True) is None


def test_a_usage_error_exits_2(capsys):
    assert main(["--timeout", "soon", "train.py"]) == 2


def test_no_cuda_device_exits_2_with_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    script = tmp_path / "train.py"
    script.write_text("import torch\nstate = torch.load('x.pt')\n")
    done = subprocess.run([sys.executable, "-m", "memlint.verify.cli", str(script),
                           "--", "--epochs", "1"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no usable CUDA device" in done.stderr


def test_a_missing_script_is_named_before_the_gpu_is_looked_for(tmp_path, capsys):
    assert main([str(tmp_path / "nosuch.py")]) == 2
    assert capsys.readouterr().err == \
        f"memlint verify: no such file or directory: {tmp_path / 'nosuch.py'}\n"


def test_json_without_a_gpu_is_an_object_saying_why_and_output_format_is_accepted(
        tmp_path, capsys, monkeypatch):
    import json
    monkeypatch.setattr("memlint.verify.runner.cuda_problem",
                        lambda device: "no usable CUDA device (test)")
    script = tmp_path / "train.py"
    script.write_text("import torch\nstate = torch.load('x.pt')\n")
    assert main([str(script), "--output-format", "json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "no usable CUDA device (test)", "scripts": [],
                               "skipped": []}
    assert err == "memlint verify: no usable CUDA device (test)\n"


def test_select_and_ignore_apply_over_the_projects_config(tmp_path):
    from memlint.verify.cli import _settings

    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nignore = ["MEM005"]\n')
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    options = build_parser().parse_args([str(script)])
    assert "MEM005" not in _settings(options).selected_codes(str(script))
    options = build_parser().parse_args([str(script), "--select", "MEM005,MEM007",
                                         "--ignore", "MEM007"])
    assert _settings(options).selected_codes(str(script)) >= {"MEM005"}
    assert "MEM007" not in _settings(options).selected_codes(str(script))
    assert "MEM003" not in _settings(options).selected_codes(str(script))


def test_preview_measures_what_check_preview_reports(tmp_path, monkeypatch):
    from memlint.verify.cli import _settings

    monkeypatch.delenv("MEMLINT_PREVIEW")
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    assert _settings(build_parser().parse_args([str(script)])).preview is False
    assert _settings(build_parser().parse_args([str(script), "--preview"])).preview is True


def test_a_script_named_alone_runs_without_findings_but_a_directory_skips_it(tmp_path):
    from memlint.engine.settings import Settings
    from memlint.verify.runner import runnable_targets
    clean = tmp_path / "train.py"
    clean.write_text("import torch\n\nif __name__ == '__main__':\n    print(torch.ones(2))\n")
    assert runnable_targets([str(clean)], Settings()) == ([(str(clean), [])], [])
    assert runnable_targets([str(tmp_path)], Settings()) == ([], [])
