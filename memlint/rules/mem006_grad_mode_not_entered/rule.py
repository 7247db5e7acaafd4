"""`torch.no_grad()` on its own line does nothing: grad mode only changes inside `with`."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.torch_api import GRAD_OFF_CONTEXTS, GRAD_ON_CONTEXTS
from memlint.rules.base import Rule

#: Context managers that change grad mode only while entered. `set_grad_enabled`
#: is missing on purpose: called as a plain function it switches the mode.
_CONTEXT_ONLY = {**GRAD_OFF_CONTEXTS, **GRAD_ON_CONTEXTS}


class GradModeNotEntered(Rule):
    """torch.no_grad(), torch.inference_mode() and torch.enable_grad() build a
    context manager; as a bare statement the object is created and dropped, so
    autograd stays as it was and the next forward pass still saves its
    activations for a backward that never comes."""

    code = "MEM006"

    MESSAGE = ("'{written}' on its own line does nothing: the grad mode only changes inside "
               "a with block, so autograd {effect}; write 'with torch.{manager}():' around "
               "the code (or decorate the function with @torch.{manager}())")
    STAYS_ON = "stays on and the forward passes that follow keep their activations for backward"
    EFFECTS = {
        "no_grad": STAYS_ON,
        "inference_mode": STAYS_ON,
        "enable_grad": "stays as it was (off under no_grad) and nothing gets a gradient",
    }

    VALID = [
        'import torch\nwith torch.no_grad():\n    y = model(x)',
        'import torch\n@torch.no_grad()\ndef evaluate(model, x):\n    return model(x)',
        'import torch\n@torch.inference_mode()\ndef predict(model, x):\n    return model(x)',
        'import torch\nguard = torch.no_grad()\nwith guard:\n    y = model(x)',
        'import torch\ntorch.set_grad_enabled(False)\ny = model(x)',
        'import torch\nwith torch.enable_grad():\n    loss = model(x).sum()',
        'def no_grad():\n    pass\nno_grad()',
        'import torch\nguard = torch.no_grad()\nguard.__enter__()\ny = model(x)',
        'import torch\nctx = torch.inference_mode() if fast else torch.no_grad()\n'
        'with ctx:\n    y = model(x)',
        'import torch\nwith torch.no_grad(), torch.autocast("cuda"):\n    y = model(x)',
        'import contextlib\nimport torch\nstack = contextlib.ExitStack()\n'
        'stack.enter_context(torch.no_grad())',
    ]
    INVALID = [
        'import torch\ntorch.no_grad()\ny = model(x)',
        'import torch\ndef evaluate(model, x):\n    model.eval()\n    torch.no_grad()\n'
        '    return model(x)',
        'import torch as T\nT.inference_mode()\ny = model(x)',
        'from torch import no_grad\nno_grad()\ny = model(x)',
        'from torch import inference_mode as im\nim()\ny = model(x)',
        'import torch\nwith torch.no_grad():\n    torch.enable_grad()\n    loss = model(x).sum()',
        'import torch.autograd\ntorch.autograd.no_grad()\ny = model(x)',
        'import torch\ntorch.no_grad\ny = model(x)',
        'import torch\nclass Evaluator:\n    def run(self, x):\n'
        '        torch.inference_mode(True)\n        return self.model(x)',
    ]

    def visit_Expr(self, node: cst.Expr) -> None:
        value = node.value
        target = value.func if isinstance(value, cst.Call) else value
        manager = _CONTEXT_ONLY.get(self.ctx.qualify(target) or "")
        if manager is None:
            return
        written = cst.Module(body=[]).code_for_node(value)
        self.report(node, self.MESSAGE.format(written=written, manager=manager,
                                              effect=self.EFFECTS[manager]))
