"""MEM007 says which cost applies, and only the ones that can matter are in the
default set: every rank on one GPU, weights meant for a module still on the
CPU. In one process a checkpoint back on the GPU it came from (a transient
copy, one kept while a loop runs, one restored as it is) is a note, in
preview."""

from __future__ import annotations

import pytest

from memlint import Settings, check_source
from tests.expectations import FIXTURES

FOLDER = FIXTURES / "load_without_map_location"


@pytest.mark.parametrize("fixture, line, phrase, severity, preview", [
    ("ranks_resume_optimizer.py", 22, "every rank restores", "warning", False),
    ("weights_before_the_move.py", 22, "still on the CPU here", "warning", False),
    ("checkpoint_kept_while_training.py", 13, "'checkpoint' keeps the checkpoint", "note",
     True),
    ("checkpoint_kept_while_training.py", 29, "in one process: a transient", "note", True),
    ("one_process_reload.py", 19, "in one process: a transient", "note", True),
    ("evaluate_checkpoints.py", 21, "every tensor restored onto the GPU", "note", True),
    ("offline_shard_merger.py", 13, "every tensor restored onto the GPU", "note", True),
    ("rank_option_only_accepted.py", 16, "'checkpoint' keeps the checkpoint", "note", True),
    ("rank_option_read.py", 16, "every rank restores", "warning", False),
    ("keys_renamed_then_returned.py", 12, "in one process: a transient", "note", True),
    ("helper_given_a_moved_model.py", 11, "in one process: a transient", "note", True),
])
def test_the_message_and_severity_name_the_case(fixture, line, phrase, severity, preview):
    path = FOLDER / fixture
    found = {f.line: f for f in check_source(path.read_text(encoding="utf-8"), str(path),
                                             Settings(preview=True)) if f.code == "MEM007"}
    assert phrase in found[line].message
    assert (found[line].severity, found[line].preview) == (severity, preview)


def test_evidence_points_at_the_move_and_the_loop():
    for fixture, line, evidence in (("weights_before_the_move.py", 22, 23),
                                    ("checkpoint_kept_while_training.py", 13, 17)):
        path = FOLDER / fixture
        finding, = [f for f in check_source(path.read_text(encoding="utf-8"), str(path))
                    if f.line == line]
        assert [r.line for r in finding.related] == [evidence]
