"""Run by `tests/test_grad_fixture_claims.py` in a process of its own (torch
imported in the test process would be inherited by every worker the other
tests fork): what the grad-mode fixtures say of the code MEM004 leaves
alone, checked by running it on the CPU."""

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "grad_in_inference"


def load(name):
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recording(model):
    """The model, and whether each of its forwards kept a graph."""
    kept = []
    model.register_forward_hook(lambda module, inputs, output: kept.append(output.requires_grad))
    return model, kept


def grad_already_off():
    fixture = load("grad_off_elsewhere")
    x = torch.randn(4, 8)
    evaluated, by_decorator = recording(nn.Linear(8, 3))
    fixture.evaluate(evaluated, x)  # the decorator bound to inference_mode
    sampler, frozen = recording(nn.Linear(8, 3))
    fixture.path_lengths(sampler, x)  # the frozen sampler
    generator, compiled = recording(nn.Linear(8, 8))
    fixture.Generator(generator).generate(x)  # the compiled method
    validated, reported = recording(nn.Linear(8, 3))
    fixture.validate(validated, x)  # reported
    assert (by_decorator, frozen, compiled) == ([False], [False, False], [False] * 3), \
        (by_decorator, frozen, compiled)
    assert reported == [True], reported


def differentiating_forward_fails_under_no_grad():
    fixture = load("forward_differentiates")
    points = torch.randn(16, 3)
    assert fixture.normals(points).shape == (16, 3)  # with autograd on, as written
    try:
        with torch.no_grad():
            fixture.normals(points)  # what the advice would have broken
    except RuntimeError:
        return
    raise AssertionError("normals ran under no_grad")


if __name__ == "__main__":
    {"off": grad_already_off, "needed": differentiating_forward_fails_under_no_grad}[sys.argv[1]]()
