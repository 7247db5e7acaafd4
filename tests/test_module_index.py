"""The module index: functions, classes and call sites gathered during the one walk."""

from __future__ import annotations

import textwrap

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import ImportTable
from memlint.analysis.walker import handlers_for, walk


def index_of(source: str) -> ModuleIndex:
    ctx = Context(ImportTable(), "example.py")
    index = ModuleIndex.of(ctx)
    walk(cst.parse_module(textwrap.dedent(source)), ctx,
         handlers_for([index], "visit_"), handlers_for([index], "leave_"))
    return index


def function(index: ModuleIndex, qualname: str):
    return next(f for f in index.functions.values() if f.qualname == qualname)


def test_one_index_per_context():
    ctx = Context(ImportTable())
    assert ModuleIndex.of(ctx) is ModuleIndex.of(ctx)


def test_call_sites_record_the_grad_mode_in_force():
    index = index_of("""
        import torch
        def f(): pass
        f()
        with torch.no_grad():
            f()
        @torch.inference_mode()
        def g():
            f()
        @smart_inference_mode()
        def h():
            f()
    """)
    modes = [site.grad_disabled for site in index.calls if site.node.func.value == "f"]
    assert modes == [False, True, True, True]


def test_methods_resolve_through_self_local_bases_and_subclasses():
    index = index_of("""
        class Base:
            def load(self, i):
                return self.decode(i)
            def decode(self, i):
                return i
        class Child(Base):
            def decode(self, i):
                return helper(i)
            def __getitem__(self, i):
                return self.load(i)
        def helper(x):
            return x
    """)
    getitem = function(index, "Child.__getitem__")
    (site,) = getitem.calls
    assert [f.qualname for f in index.callees(site)] == ["Base.load"]
    load = function(index, "Base.load")
    assert {f.qualname for f in index.callees(load.calls[0])} == {"Base.decode", "Child.decode"}


def test_reachable_follows_calls_a_fixed_number_deep_and_includes_lambdas():
    index = index_of("""
        def a(): return b()
        def b(): return c()
        def c(): return d()
        def d(): return e()
        def e(): pass
        def entry():
            fn = lambda x: a()
            return fn(1)
    """)
    reached = {f.qualname: depth for f, depth in index.reachable(function(index, "entry")).items()}
    assert reached == {"entry": 0, "<lambda>": 0, "a": 1, "b": 2, "c": 3}


def test_grad_disabled_by_callers_is_transitive():
    index = index_of("""
        import torch
        def leaf(): pass
        def middle(): leaf()
        @torch.no_grad()
        def top(): middle()
        def other(): pass
        other()
        def unused(): pass
    """)
    off = {name: index.grad_disabled_by_callers(function(index, name))
           for name in ("leaf", "middle", "top", "other", "unused")}
    assert off == {"leaf": True, "middle": True, "top": False, "other": False, "unused": False}


def test_one_unguarded_caller_or_an_escape_keeps_grad_on():
    index = index_of("""
        import torch
        from functools import partial
        def helper(): pass
        def passed_around(): pass
        with torch.no_grad():
            helper()
            passed_around()
        helper()
        run = partial(passed_around)
    """)
    assert not index.grad_disabled_by_callers(function(index, "helper"))
    assert not index.grad_disabled_by_callers(function(index, "passed_around"))


def test_methods_called_on_other_objects_match_loosely_for_callers_only():
    index = index_of("""
        import torch
        class Trainer:
            def evaluate(self): pass
        trainer = Trainer()
        with torch.no_grad():
            trainer.evaluate()
    """)
    evaluate = function(index, "Trainer.evaluate")
    assert index.grad_disabled_by_callers(evaluate)
    (site,) = [s for s in index.calls
               if isinstance(s.node.func, cst.Attribute) and s.node.func.attr.value == "evaluate"]
    assert index.callees(site) == []
