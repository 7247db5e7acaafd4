"""memlint's layers, read from its import statements: no circle anywhere, and
imports point down only (front ends -> engine -> rules -> analysis -> finding).
A rule package's `verify.py` is `memlint verify`'s plug-in: it stands with verify."""

from __future__ import annotations

from tests.import_graph import cycles, import_graph

#: each layer and the layers it may import (its own included)
MAY_IMPORT = {
    "finding": {"finding"},
    "version": {"version"},
    "analysis": {"analysis", "finding"},
    "rules": {"rules", "analysis", "finding"},
    "engine": {"engine", "rules", "analysis", "finding", "version"},
    "cli": {"cli", "engine", "rules", "analysis", "finding", "version", "verify"},
    "verify": {"verify", "engine", "rules", "analysis", "finding", "version"},
    "package": {"engine", "finding", "version"},
    "main": {"cli"},
}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] == "rules" and parts[-1] == "verify":
        return "verify"
    return {"__main__": "main"}.get(parts[1], parts[1])


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_imports_point_down():
    upward = sorted(f"{module} -> {target}"
                    for module, targets in import_graph().items()
                    for target in targets
                    if layer(target) not in MAY_IMPORT[layer(module)])
    assert upward == []


def test_only_the_command_line_starts_verify():
    """`memlint verify` is dispatched from cli/main.py; nothing else in the
    front ends, and nothing in the engine, knows verify exists."""
    importers = {module for module, targets in import_graph().items()
                 if layer(module) == "cli" and any(layer(t) == "verify" for t in targets)}
    assert importers == {"memlint.cli.main"}
