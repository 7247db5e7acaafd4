"""The in-memory instrumentation: probes on exactly the flagged statements,
original line numbers kept, sensible placement on compound statements."""

from __future__ import annotations

import builtins
import math
import traceback

import pytest

from memlint.verify.instrument import PROBE_NAME, choose_statement, instrument, is_runnable

SOURCE = '''\
import math
total = 0
def step(n):
    value = math.sqrt(n)
    return value * 2
for i in range(3):
    total += step(i)
if total: flag = True
'''


class RecordingProbe:
    def __init__(self):
        self.calls = []

    def enter(self, key):
        self.calls.append(("enter", key))

    def failed(self, key):
        self.calls.append(("failed", key))

    def exit(self, key):
        self.calls.append(("exit", key))


@pytest.fixture
def probe(monkeypatch):
    recorder = RecordingProbe()
    monkeypatch.setattr(builtins, PROBE_NAME, recorder, raising=False)
    return recorder


def run(source, findings):
    instrumented = instrument(source, "script.py", findings)
    namespace = {"__name__": "__main__"}
    exec(instrumented.code, namespace)
    return instrumented, namespace


def test_only_flagged_statements_are_probed_and_the_program_is_unchanged(probe):
    instrumented, namespace = run(SOURCE, [(0, 5, "MEM003")])
    assert namespace["total"] == sum(math.sqrt(i) * 2 for i in range(3))
    assert probe.calls == [("enter", 0), ("exit", 0)] * 3
    assert [(s.line, s.kind) for s in instrumented.statements] == [(5, "Return")]


def test_two_findings_on_one_statement_share_one_probe(probe):
    instrumented, _ = run(SOURCE, [(0, 7, "MEM003"), (1, 7, "MEM001")])
    assert len(instrumented.statements) == 1
    assert instrumented.statements[0].findings == [(0, "MEM003"), (1, "MEM001")]
    assert probe.calls.count(("enter", 0)) == 3


def test_a_one_line_if_probes_the_statement_inside(probe):
    instrumented, namespace = run(SOURCE, [(0, 8, "MEM001")])
    assert instrumented.statements[0].kind == "Assign"
    assert namespace["flag"] is True and probe.calls == [("enter", 0), ("exit", 0)]


def test_a_loop_header_is_probed_as_a_whole(probe):
    instrumented, _ = run(SOURCE, [(0, 6, "MEM005")])
    assert instrumented.statements[0].kind == "For"
    assert probe.calls == [("enter", 0), ("exit", 0)]


def test_a_def_line_cannot_be_probed():
    instrumented = instrument(SOURCE, "script.py", [(3, 3, "MEM004")])
    assert instrumented.statements == []
    assert "FunctionDef" in instrumented.unprobed[3]


def test_exit_runs_when_the_statement_raises_and_the_line_is_the_original(probe):
    source = "x = 1\n\ny = 1 / (x - 1)\n"
    instrumented = instrument(source, "script.py", [(0, 3, "MEM001")])
    with pytest.raises(ZeroDivisionError) as error:
        exec(instrumented.code, {})
    assert probe.calls == [("enter", 0), ("failed", 0), ("exit", 0)]
    frames = traceback.extract_tb(error.value.__traceback__)
    assert (frames[-1].filename, frames[-1].lineno) == ("script.py", 3)


def test_choose_statement_says_when_no_statement_starts_on_the_line():
    import ast

    assert "no statement" in choose_statement(ast.parse("x = (1,\n     2)\n"), 2)


@pytest.mark.parametrize("source, runnable", [
    ('if __name__ == "__main__":\n    main()\n', True),
    ("import torch\nmain()\n", True),
    ("for x in range(3):\n    pass\n", True),
    ("import torch\ndef main():\n    pass\n", False),
    ('"""doc"""\nimport torch\nDEVICE = torch.device("cuda")\nclass A:\n    pass\n', False),
    ("def broken(:\n", False),
])
def test_runnable_scripts(source, runnable):
    assert is_runnable(source) is runnable


def test_a_caught_error_inside_the_statement_is_not_reported_as_failed(probe):
    source = "try:\n    int('x')\nexcept ValueError:\n    pass\nvalue = 1\n"
    run(source, [(0, 2, "MEM001"), (1, 5, "MEM001")])
    assert probe.calls == [("enter", 0), ("failed", 0), ("exit", 0), ("enter", 1), ("exit", 1)]


@pytest.mark.parametrize("statement, accumulator", [
    ("losses.append(loss)", "losses"),
    ("self.history.extend(outs)", "self.history"),
    ("total += loss", "total"),
    ("total = total + loss", "total"),
    ("outs[k] = out", "outs"),
    ("get_list().append(x)", None),  # reading it back would call get_list again
    ("print(x)", None),
])
def test_the_accumulator_a_statement_adds_to(statement, accumulator):
    import ast

    from memlint.verify.instrument import accumulator_of
    assert accumulator_of(ast.parse(statement).body[0]) == accumulator
