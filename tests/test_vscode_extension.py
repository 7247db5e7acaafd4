"""The VS Code extension in editors/vscode: its manifest, and its own tests
(`node --test`: extension.js with a stand-in `vscode` module; where
`npm install` has been run, also with the real vscode-languageclient against
the real `memlint server`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parent.parent / "editors" / "vscode"


def _manifest() -> dict:
    return json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))


def test_manifest_declares_the_settings_and_the_command():
    manifest = _manifest()
    assert manifest["name"] == "memlint"
    assert (EXTENSION / manifest["main"]).is_file()
    assert "onLanguage:python" in manifest["activationEvents"]
    settings = manifest["contributes"]["configuration"]["properties"]
    assert {"memlint.path", "memlint.interpreter"} <= set(settings)
    assert settings["memlint.path"]["default"] == ["memlint"]
    assert settings["memlint.path"]["items"] == {"type": "string"}
    assert [c["command"] for c in manifest["contributes"]["commands"]] == ["memlint.restart"]
    # the client library it bundles, and the VS Code that library needs
    assert manifest["dependencies"]["vscode-languageclient"].startswith("9.")
    assert manifest["engines"]["vscode"] == "^1.82.0"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("node") is None,
                    reason="node is not on PATH: the extension's tests run under Node.js")
def test_node_tests_pass():
    env = dict(os.environ)
    # `memlint` of this interpreter first, for the test that starts the server
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    # no arguments: Node then runs test/**/*.js and skips node_modules
    # (`node --test test/` is a path on Node 20, a glob matching no file on 22)
    run = subprocess.run(["node", "--test", "--test-reporter=tap"], cwd=EXTENSION, env=env,
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    counts = dict(re.findall(r"^# (tests|pass|fail|skipped) (\d+)$", out, re.MULTILINE))
    assert counts["fail"] == "0" and int(counts["pass"]) >= 16, out
    if (EXTENSION / "node_modules" / "vscode-languageclient").is_dir():
        assert counts["skipped"] == "0", out  # the real-client tests ran too
