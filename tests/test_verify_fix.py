"""`memlint verify --fix` on the CPU: the program runs as written and with
its fixes applied in the file's place (the file untouched), and each fix's
quantity is compared between the two runs."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from memlint.engine import check_file  # noqa: E402
from memlint.engine.settings import Settings  # noqa: E402
from memlint.verify.fix_effects import compare_fixes, format_text, line_map  # noqa: E402
from memlint.verify.runner import Options  # noqa: E402
from tests.verify_helpers import DATA  # noqa: E402


def test_line_map_follows_inserted_and_rewritten_lines():
    before = "a\nb\nc = f(x)\nd\n"
    after = "a\n@dec\nb\nc = f(x, y)\nd\n"
    where = line_map(before, after)
    assert [where(n) for n in (1, 2, 3, 4)] == [1, 3, 4, 5]


def test_a_fix_is_measured_in_a_second_run_and_the_file_is_untouched():
    path = str(DATA / "fix_ab.py")
    original = open(path, encoding="utf-8").read()
    findings, _ = check_file(path, Settings())
    assert [f.code for f in findings] == ["MEM004"]
    options = Options(device="cpu", seed=0)
    safe_only = compare_fixes(path, findings, options, unsafe=False)
    assert safe_only.after is None and "--unsafe-fixes" in safe_only.not_fixed
    comparison = compare_fixes(path, findings, options, unsafe=True)
    assert open(path, encoding="utf-8").read() == original
    assert comparison.after.outcome == {"exit": "completed"}
    assert "score" in comparison.after.log_tail
    effect, = comparison.effects
    assert effect.fixed_line == findings[0].line + 1  # the decorator went in above
    # one call: the 512 x 1024 hidden activation (ReLU output) and its input, float32
    assert effect.before >= 512 * 1024 * 4 and effect.after == 0
    assert effect.saved == effect.before
    assert "activations saved for backward in one call" in format_text([comparison])


def test_a_fix_confirmed_on_host_graph_nodes_is_compared_in_graph_nodes():
    """A running sum of losses after backward keeps graph nodes on the host, not
    device bytes: its fix is measured in what the finding was confirmed on."""
    path = str(DATA / "fix_host_graph.py")
    findings, _ = check_file(path, Settings())
    assert [f.code for f in findings] == ["MEM003"]
    comparison = compare_fixes(path, findings, Options(device="cpu", seed=0), unsafe=True)
    assert comparison.before.verified[0].judgement.numbers["confirmed_on"] == "host"
    effect, = comparison.effects
    assert (effect.what, effect.unit) == ("autograd graph nodes kept per iteration", "graph nodes")
    assert effect.before >= 1 and effect.after == 0
    assert f"-> 0 graph nodes (saved {effect.before:.0f} graph nodes)" in format_text([comparison])


def test_the_cli_reports_both_runs_in_text_and_json(monkeypatch, capsys, tmp_path):
    """The whole `verify --fix` command, on the CPU (the CUDA check stubbed out)."""
    import json

    import memlint.verify.runner as runner
    from memlint.verify.cli import main

    monkeypatch.setattr(runner, "cuda_problem", lambda device: None)
    script = tmp_path / "fix_ab.py"
    script.write_text((DATA / "fix_ab.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["--device", "cpu", "--unsafe-fixes", str(script)]) == 2
    assert "--unsafe-fixes needs --fix" in capsys.readouterr().err
    main(["--device", "cpu", "--fix", "--unsafe-fixes", str(script)])
    text = capsys.readouterr().out
    assert "1 fix applied in a copy (1 unsafe), the file untouched" in text
    assert "-> 0 B (saved 2.50 MiB)" in text
    main(["--device", "cpu", "--fix", "--format", "json", str(script)])
    data = json.loads(capsys.readouterr().out)
    assert data["scripts"][0]["findings"][0]["code"] == "MEM004"
    assert data["fixes"][0]["effects"] == [] and "--unsafe-fixes" in data["fixes"][0]["not_fixed"]
