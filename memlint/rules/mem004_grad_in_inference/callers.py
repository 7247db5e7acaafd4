"""Where a helper's forward runs, as its callers in other files show: a
function that runs the model and the inputs it is handed (`get_model_summary
(model, *inputs)`) costs no GPU memory when every caller hands it tensors made
on the host and a model not put on a GPU: the forward runs on the CPU."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from memlint.analysis.names import dotted_name
from memlint.analysis.project import Condition, Project


@dataclass(frozen=True)
class UnlessCallersGiveHostInputs(Condition):
    """A forward of what a function is handed, the function called from other
    files only: dropped when it is called, and every call hands host tensors
    at the input slots (`inputs`, and every slot from `rest` on when the forward
    takes `*args`) and, at the model's slot, nothing put on a GPU."""

    module: str
    function: str
    model: int | None
    inputs: tuple[int, ...]
    rest: int | None

    def drops(self, project: Project) -> bool:
        calls = project.calls_of(self.module, self.function)
        return bool(calls) and all(self._on_host(call.places) for _, call in calls)

    def _on_host(self, places: str) -> bool:
        handed = [places[slot] if slot < len(places) else "?" for slot in self.inputs]
        if self.rest is not None:
            handed += places[self.rest:] or "?"
        model = places[self.model] if self.model is not None and self.model < len(places) \
            else "?"
        return bool(handed) and all(place == "h" for place in handed) and model != "c"


def forward_slots(function: cst.FunctionDef | cst.Lambda,
                  forward: cst.Call) -> tuple[int | None, tuple[int, ...], int | None] | None:
    """Which of `function`'s positional parameters the forward runs (the model,
    its inputs, the first slot of `*args` it passes on), or None when an input
    is made inside the function or handed by keyword (its callers cannot tell)."""
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
    model_name = dotted_name(forward.func)
    model = positional.index(model_name) if model_name in positional else None
    inputs: list[int] = []
    rest = None
    for arg in forward.args:
        name = arg.value.value if type(arg.value) is cst.Name else None
        if arg.keyword is None and not arg.star and name in positional:
            inputs.append(positional.index(name))
        elif arg.star == "*" and name is not None and name == star:
            rest = len(positional)
        else:
            return None
    return (model, tuple(inputs), rest) if inputs or rest is not None else None


@dataclass(frozen=True)
class PreviewUnlessRunWithGradOn(Condition):
    """A forward with no `eval()` before it, in a function taken for
    inference by its name alone (`predict`, `val_step`), that no code of its
    file runs with grad on: a preview variant unless another file calls one
    of its ways in with grad on (a function through an import, a method by
    name outside training). A method a framework calls (detectron2's
    `inference_on_dataset`, Lightning's hooks, a trainer engine) shows no
    such call, and its name says nothing of the grad mode it runs in."""

    module: str
    functions: tuple[str, ...]
    methods: tuple[str, ...]

    def drops(self, project: Project) -> bool:
        return False

    def previews(self, project: Project) -> bool:
        for function in self.functions:
            if any(not call.grad_disabled for _, call in project.calls_of(self.module, function)):
                return False
        return not any(facts.method_calls.get(method) is False for facts in project.modules
                       for method in self.methods if facts.module != self.module)
