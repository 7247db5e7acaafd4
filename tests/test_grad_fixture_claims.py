"""What the grad-mode fixtures say of the code they leave alone, checked by
running it (CPU): the functions MEM004 does not report record no graph, or
need autograd in their forward; the one it reports records one. The GPU
measurement of the reported lines is `bench/results/verify-mem004/`."""

from __future__ import annotations

import importlib.util

import pytest

from tests.expectations import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn


def _load(name: str):
    path = FIXTURES / "grad_in_inference" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recording(model):
    """The model, and whether each of its forwards kept a graph."""
    kept: list[bool] = []
    model.register_forward_hook(lambda module, inputs, output: kept.append(output.requires_grad))
    return model, kept


def test_grad_already_off_where_memlint_leaves_it_alone():
    fixture = _load("grad_off_elsewhere")
    x = torch.randn(4, 8)
    evaluated, by_decorator = _recording(nn.Linear(8, 3))
    fixture.evaluate(evaluated, x)  # the decorator bound to inference_mode
    sampler, frozen = _recording(nn.Linear(8, 3))
    fixture.path_lengths(sampler, x)  # the frozen sampler
    generator, compiled = _recording(nn.Linear(8, 8))
    fixture.Generator(generator).generate(x)  # the compiled method
    validated, reported = _recording(nn.Linear(8, 3))
    fixture.validate(validated, x)  # reported
    assert (by_decorator, frozen, compiled) == ([False], [False, False], [False] * 3)
    assert reported == [True]


def test_a_forward_that_differentiates_fails_under_no_grad():
    fixture = _load("forward_differentiates")
    points = torch.randn(16, 3)
    assert fixture.normals(points).shape == (16, 3)  # with autograd on, as written
    with torch.no_grad(), pytest.raises(RuntimeError):
        fixture.normals(points)  # what the advice would have broken
