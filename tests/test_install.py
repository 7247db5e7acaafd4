"""What a user installs: the built wheel and sdist, in a fresh virtualenv,
with its dependencies from the package index, checks the fixtures as the
checkout does (README: "from a wheel you build"), and runs the README's
example and every configuration snippet of the docs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_built_wheel_in_a_fresh_venv_checks_the_fixtures_as_the_checkout_does(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                            str(dist), str(CHECKOUT)], capture_output=True, text=True,
                           timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("torch_memlint-*-py3-none-any.whl")
    assert len(list(dist.glob("torch_memlint-*.tar.gz"))) == 1
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q",
                                str(wheel)], capture_output=True, text=True, timeout=600,
                               env=env, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    fresh = subprocess.run([str(bin_dir / "memlint"), "check", "--no-cache", "fixtures/"],
                           cwd=CHECKOUT, capture_output=True, text=True, timeout=600, env=env,
                           check=False)
    ours = subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", "fixtures/"],
                          cwd=CHECKOUT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert (fresh.returncode, fresh.stdout, fresh.stderr) == \
        (ours.returncode, ours.stdout, ours.stderr)
    assert fresh.returncode == 1 and fresh.stdout.startswith("fixtures/")
    _the_docs_run_on(bin_dir / "memlint", env, tmp_path)


def _the_docs_run_on(memlint: Path, env: dict, tmp_path: Path) -> None:
    """The README's example prints what it shows, and every configuration
    snippet of the docs is accepted, by the installed wheel."""
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```console\n", 1)[1].split("```", 1)[0]
    command, rest = block.split("\n", 1)
    as_a_user = {k: v for k, v in env.items() if k != "MEMLINT_PREVIEW"}  # preview as shipped
    shown = subprocess.run([str(memlint), *command.split()[2:]], cwd=CHECKOUT, env=as_a_user,
                           capture_output=True, text=True, timeout=300, check=False)
    assert shown.stdout == rest.split("$ echo $?", 1)[0]
    from tests.test_docs import CONFIG_SNIPPETS
    for number, (where, snippet) in enumerate(CONFIG_SNIPPETS):
        project = tmp_path / f"project-{number}"
        project.mkdir()
        (project / "pyproject.toml").write_text(snippet, encoding="utf-8")
        loaded = subprocess.run([str(memlint), "check", "--show-settings", "."], cwd=project,
                                env=env, capture_output=True, text=True, timeout=120,
                                check=False)
        assert loaded.returncode == 0, f"{where}: {loaded.stderr}"


def test_no_install_line_in_the_docs_names_a_distribution_the_index_lacks():
    """`pip install torch-memlint` finds nothing until a release exists: every
    line that installs memlint names a checkout, a git URL or a wheel."""
    docs = [CHECKOUT / "README.md", *(CHECKOUT / "docs").glob("*.md"),
            CHECKOUT / "editors" / "vscode" / "README.md"]
    commands = [line.strip().removeprefix("- run: ") for doc in docs
                for line in doc.read_text(encoding="utf-8").splitlines()]
    installs = [c for c in commands if c.startswith("pip install") or "&& pip install" in c]
    assert len(installs) >= 5
    from_the_index = [c for c in installs if "memlint" in c.split("#")[0] and not any(
        source in c for source in ("git+", ".whl", "-e .", "./"))]
    assert from_the_index == []
