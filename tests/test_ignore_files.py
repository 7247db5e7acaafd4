"""A directory walk skips what .gitignore and .ignore files name, as ruff's does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import check, write

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Path:
    """A git work tree (a `.git` folder is what marks one) as the working directory."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    write(tmp_path / "src" / "train.py", FLAGGED)
    write(tmp_path / "wandb" / "run-1" / "files" / "train.py", FLAGGED)
    write(tmp_path / ".gitignore", "wandb/\n*.generated.py\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def flagged_paths(out: str) -> list[str]:
    return sorted(line.split(":", 1)[0] for line in out.splitlines() if " MEM007 " in line)


def test_a_gitignored_run_folder_is_skipped_and_the_flag_turns_it_back_on(repository, capsys):
    assert flagged_paths(check(capsys, ".")[1]) == ["./src/train.py"]
    every = check(capsys, "--no-respect-gitignore", ".")[1]
    assert flagged_paths(every) == ["./src/train.py", "./wandb/run-1/files/train.py"]


def test_respect_gitignore_false_in_the_config_checks_ignored_files(repository, capsys):
    (repository / "pyproject.toml").write_text("[tool.memlint]\nrespect-gitignore = false\n")
    assert len(flagged_paths(check(capsys, ".")[1])) == 2
    assert len(flagged_paths(check(capsys, "--respect-gitignore", ".")[1])) == 1


def test_a_parent_folders_gitignore_applies_to_a_walk_of_a_subfolder(repository, capsys):
    write(repository / "src" / "model.generated.py", FLAGGED)
    assert flagged_paths(check(capsys, "src")[1]) == ["src/train.py"]


def test_nested_ignore_files_and_negation_follow_git(repository, capsys):
    write(repository / "src" / "vendored" / "lib.py", FLAGGED)
    write(repository / "src" / "vendored" / "ours.py", FLAGGED)
    write(repository / "src" / ".ignore", "vendored/*\n!vendored/ours.py\n")
    assert flagged_paths(check(capsys, ".")[1]) == ["./src/train.py", "./src/vendored/ours.py"]


def test_a_file_or_folder_named_on_the_command_line_is_checked_even_if_ignored(
        repository, capsys):
    named = "wandb/run-1/files/train.py"
    assert flagged_paths(check(capsys, named)[1]) == [named]
    assert flagged_paths(check(capsys, "wandb")[1]) == [named]


def test_outside_a_git_repository_only_the_walked_trees_ignore_files_count(tmp_path,
                                                                           monkeypatch, capsys):
    write(tmp_path / ".gitignore", "project/skipped/\n")  # above the tree, no repository
    write(tmp_path / "project" / "skipped" / "train.py", FLAGGED)
    write(tmp_path / "project" / "also" / "train.py", FLAGGED)
    write(tmp_path / "project" / ".gitignore", "also/\n")
    monkeypatch.chdir(tmp_path / "project")
    assert flagged_paths(check(capsys, ".")[1]) == ["./skipped/train.py"]


@pytest.mark.parametrize("pattern, path, is_folder, ignored", [
    ("wandb/", "wandb", True, True), ("wandb/", "wandb", False, None),
    ("wandb/", "src/wandb", True, True), ("/top.py", "top.py", False, True),
    ("/top.py", "src/top.py", False, None), ("doc/*.txt", "doc/a.txt", False, True),
    ("doc/*.txt", "doc/x/a.txt", False, None), ("a/**/b", "a/b", False, True),
    ("a/**/b", "a/x/y/b", False, True), ("**/foo", "x/y/foo", False, True),
    ("abc/**", "abc/d/e", False, True), ("*.py[cod]", "m.pyc", False, True),
    ("[!a]y.py", "ay.py", False, None), ("[!a]y.py", "by.py", False, True),
    ("d?t", "dot", False, True), ("\\#hash", "#hash", False, True),
    ("# a comment", "# a comment", False, None), ("!keep.log", "keep.log", False, False),
    ("trailing.py   ", "trailing.py", False, True),
])
def test_patterns_match_as_git_reads_them(pattern, path, is_folder, ignored):
    from memlint.engine.ignore_files import _pattern, _verdict
    compiled = [p for p in [_pattern(pattern)] if p is not None]
    assert _verdict(compiled, path, is_folder) is ignored


def test_the_repositorys_info_exclude_counts_when_its_root_is_walked(repository, capsys):
    write(repository / ".git" / "info" / "exclude", "src/train.py\n")
    assert flagged_paths(check(capsys, ".")[1]) == []
    assert flagged_paths(check(capsys, "src")[1]) == []
