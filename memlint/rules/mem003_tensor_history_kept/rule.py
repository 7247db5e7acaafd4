"""A tensor with autograd history kept across loop iterations holds every iteration's graph."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.autograd_values import (BACKWARD_METHODS, HISTORY_SCALAR, AutogradValues,
                                              BackwardFlows, backpropagated, steps_an_optimizer)
from memlint.analysis.context import Context, Loop
from memlint.analysis.models import is_forward_code
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import dotted_name
from memlint.analysis.stores import (Store, StoresAt, code, container_name, is_data_loop,
                                     outlived_loops, reads_across_batches)
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.project import (Condition, Either, UnlessForwardsGiveNoHistoryAt,
                                      UnlessImportedFunctionsKeepNoHistory,
                                      UnlessProgramMethodsKeepNoHistory, UnlessProjectOnCpu)
from memlint.analysis.torch_api import AUTOGRAD_ENTRY
from memlint.rules.base import Rule, RuleOptions
from memlint.rules.mem003_tensor_history_kept.across_calls import AcrossCalls
from memlint.rules.mem003_tensor_history_kept.fix import detach_fix, message
from memlint.rules.mem003_tensor_history_kept.kept import (Frame, KeptStore, freed_by_backward,
                                                          kept_for_its_data)


class TensorHistoryKept(Rule):
    """A value that still carries autograd history (a module's output, a loss,
    arithmetic on them) stored in something that outlives the loop iteration:
    `losses.append(loss)`, `total += loss`, `x = torch.cat((x, out))`. Each
    stored value keeps its whole graph alive, and with it every tensor saved for
    backward: eval outputs kept without `no_grad` retain their activations each
    step; a kept loss retains at least its graph and a storage as large as its
    input. Store `loss.item()` for scalars, `out.detach()` (or
    `.detach().cpu()`) for tensors."""

    code = "MEM003"

    VALID = [
        # back-propagated, then the name bound to a number before it is kept
        "import torch\nimport numpy as np\ntotal = 0\nfor x, y in folds:\n"
        "    loss = criterion(model(x.cuda()), y)\n    loss.backward()\n"
        "    loss = np.mean(np.abs(y - predict(x)))\n    total += loss",
        # back-propagated, then kept as a number
        "import torch\nfrom losses import combined_loss\ntotal = 0\nfor x, y in loader:\n"
        "    loss, parts = combined_loss(model(x.cuda()), y)\n    loss.backward()\n"
        "    total += loss.item()",
        # made afresh every epoch, grows over the two models of one step only
        "import torch\nfor epoch in range(3):\n    feats = []\n    for net in nets:\n"
        "        out, feat = net(x)\n        criterion(out, y).backward()\n"
        "        feats.append(feat)\n    plot(feats)",
        # .item() gives a Python float
        "import torch\nlosses = []\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    losses.append(loss.item())",
        # under no_grad
        "import torch\nouts = []\nwith torch.no_grad():\n    for x in loader:\n"
        "        outs.append(model(x))",
        # detached output
        "import torch\nouts = []\nfor x in loader:\n    outs.append(model(x).detach().cpu())",
        # a comparison has no history
        "import torch\ncorrect = 0\nfor x, y in loader:\n    out = model(x)\n"
        "    correct += (out.argmax(1) == y).sum()",
        # the indices of torch.max
        "import torch\npreds = []\nfor x in loader:\n    _, pred = torch.max(model(x), 1)\n"
        "    preds.append(pred)",
        # rebuilt every iteration
        "import torch\nfor epoch in range(3):\n    for x, y in loader:\n        batch_losses = []\n"
        "        batch_losses.append(criterion(model(x), y))\n"
        "        sum(batch_losses).backward()",
        # REINFORCE: the log-probs are kept for one backward after the episode
        "import torch\nfrom torch.distributions import Categorical\nlog_probs = []\n"
        "for t in range(100):\n    dist = Categorical(policy(state))\n    action = dist.sample()\n"
        "    log_probs.append(dist.log_prob(action))\n"
        "loss = -torch.stack(log_probs).sum()\nloss.backward()",
        # a helper that returns a float, whatever its name
        "import torch\ndef compute_loss(out, y):\n    return criterion(out, y).item()\n"
        "total = 0.0\nfor x, y in loader:\n    total += compute_loss(model(x), y)",
        # a loss of detached inputs
        "import torch.nn as nn\nmse = nn.MSELoss()\nhist = []\nfor x in loader:\n"
        "    out = model(x)\n    hist.append(mse(out.detach(), x.data))",
        # a residual chain in a forward, not an accumulation
        "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
        "        for block in self.blocks:\n            x = x + block(x)\n        return x",
        # the accumulated loss is back-propagated once: gradient accumulation on purpose
        "import torch\nloss_total = 0\nfor x, y in loader:\n"
        "    loss_total = loss_total + criterion(model(x), y)\nloss_total.backward()",
        # not PyTorch at all (d2l's mxnet flavour)
        "from mxnet import nd\nscores = []\nfor t in data_iter:\n    scores.append(net(t))",
        # a project's own no_grad wrapper (yolov5's val.py)
        "import torch\nfrom utils import smart_inference_mode\n@smart_inference_mode()\n"
        "def run(model, loader):\n    loss = torch.zeros(3)\n    for im, targets in loader:\n"
        "        loss += compute_loss(model(im), targets)[1]\n    return loss",
        # the terms of one loss summed over heads, for a backward elsewhere
        "import torch\ndef total_loss(self, embeddings, labels):\n"
        "    for i, size in enumerate(self.embedding_sizes):\n"
        "        self.losses[i] += self.metric_loss(embeddings[:, :size], labels)",
        # timings read off a wrapper's results in a benchmark loop
        "import torch\nrun_times = []\nfor _ in range(num_runs):\n"
        "    results = model(image)\n    run_times.append(results[0].speed['inference'])",
        # a method called through a local alias named like a module (transformers' MGP-STR)
        "import torch\ndef decode(self, logits):\n    decoder = self.char_decode\n"
        "    strs = decoder(logits.argmax(-1))\n    out = []\n    for i in range(batch_size):\n"
        "        out.append(strs[i])",
        # a per-step accumulator: rebuilt every step of the outer loop, one backward per step
        "import torch\nfor epoch in range(3):\n    for step, batch in enumerate(loader):\n"
        "        step_losses = []\n        for micro in batch:\n"
        "            step_losses.append(criterion(model(micro), y))\n"
        "        torch.stack(step_losses).sum().backward()",
        # emptied with .clear() after the backward, every iteration
        "import torch\npending = []\nfor batch in loader:\n    for micro in batch:\n"
        "        pending.append(criterion(model(micro), y))\n    sum(pending).backward()\n"
        "    pending.clear()",
        # emptied with `del [:]` every iteration, as `.clear()` empties it
        "import torch\nlosses = []\nfor batch in loader:\n    losses.append(model(batch).sum())\n"
        "    del losses[:]",
        # the episode's lists handed to a helper that back-propagates them (ACER)
        "import torch\ndef compute_loss(policies, values):\n"
        "    loss = -torch.stack(policies).sum() + torch.cat(values).pow(2).mean()\n"
        "    loss.backward()\nwhile frame_idx < max_frames:\n    policies, values = [], []\n"
        "    for step in range(num_steps):\n        policy, value = model(state)\n"
        "        policies.append(policy)\n        values.append(value)\n"
        "    compute_loss(policies, values)",
        # REINFORCE on self: collect() appends, update() back-propagates and empties the list
        "import torch\nclass Agent:\n    def collect(self, env):\n        for t in range(100):\n"
        "            self.log_probs.append(self.policy(env.state()).log_prob(a))\n"
        "    def update(self):\n        loss = -torch.cat(self.log_probs).sum()\n"
        "        loss.backward()\n        del self.log_probs[:]",
        # lists returned by the episode, back-propagated by the caller
        "import torch\ndef run_episode():\n    log_probs = []\n    for t in range(100):\n"
        "        log_probs.append(policy(state).log_prob(a))\n    return log_probs\n"
        "for episode in range(1000):\n    loss = -torch.cat(run_episode()).sum()\n"
        "    loss.backward()",
        # a helper defined further down that returns floats (notebook order)
        "import torch\ntrain_losses = []\nfor x, y in loader:\n"
        "    train_losses.append(compute_loss(model(x), y))\n"
        "def compute_loss(out, y):\n    return criterion(out, y).item()",
        # named by what it does, not a model: its first result is a numpy action (A3C)
        "import torch\ndef run(self):\n    while not done:\n"
        "        action, log_prob = self.pick_action_and_get_critic_values(state)\n"
        "        self.episode_actions.append(action)",
        # the terms of one loss summed over feature levels, returned in a dict (DFC-VAE)
        "import torch\nimport torch.nn.functional as F\n"
        "def loss_function(recons_features, input_features):\n    feature_loss = 0.0\n"
        "    for (r, i) in zip(recons_features, input_features):\n"
        "        feature_loss += F.mse_loss(r, i)\n    return {'loss': feature_loss}",
        # a from-scratch RNN's outputs per time step, returned to the caller's backward
        "import torch\nimport torch.nn as nn\ndef gru(inputs, state, params):\n"
        "    outputs = []\n    for X in inputs:\n        m = nn.Sigmoid()\n"
        "        outputs.append(m(X @ params[0]))\n    return outputs, state",
    ]
    INVALID = [
        # a loss made by the project's own function in another file: it was
        # back-propagated, so it carries history whatever made it
        "import torch\nfrom losses import combined_loss\ntotal = 0\nfor x, y in loader:\n"
        "    loss, parts = combined_loss(model(x.cuda()), y)\n    loss.backward()\n"
        "    optimizer.step()\n    total += loss",
        "import torch\nlosses = []\nfor batch in loader:\n    loss = compute(batch)\n"
        "    accelerator.backward(loss)\n    losses.append(loss)",
        "import torch\nlosses = []\nfor x, y in loader:\n    loss = criterion(model(x), y)\n"
        "    loss.backward()\n    losses.append(loss)",
        "import torch\ntotal_loss = 0\nfor x, y in loader:\n    out = model(x)\n"
        "    loss = criterion(out, y)\n    loss.backward()\n    total_loss += loss",
        "import torch\nouts = []\nfor x in loader:\n    outs.append(model(x))",
        "import torch\nhistory = {'loss': []}\nfor x, y in loader:\n"
        "    history['loss'].append(criterion(model(x), y))",
        "import torch\nacc = 0\nfor x, y in loader:\n    acc = acc + loss_fn(net(x), y)",
        "import torch\nfeats = None\nfor x in loader:\n    out = encoder(x)\n"
        "    feats = out if feats is None else torch.cat((feats, out))",
        "import torch\nfrom torch.nn import functional as F\nclass Trainer:\n"
        "    def __init__(self):\n        self.losses = []\n    def fit(self, loader):\n"
        "        for x, y in loader:\n            loss = F.cross_entropy(self.model(x), y)\n"
        "            self.losses.append(loss)",
        "import torch.nn as nn\ncrit = nn.MSELoss()\nrunning = 0.0\nwhile step < 10:\n"
        "    running += crit(net(x), y) * x.size(0)",
        "import torch\nx = torch.zeros(0, 4)\nfor batch in loader:\n"
        "    x = torch.cat([x, model(batch)], dim=0)",
        "import torch\nmetrics = {}\nfor x, y in loader:\n    outputs = model(x)\n"
        "    metrics['loss'] += outputs.loss",
        # an alias of the model attribute is the model
        "import torch\ndef collect(self, loader):\n    net = self.model\n    outs = []\n"
        "    for x in loader:\n        outs.append(net(x))",
        # torchtune's recipes: the running loss keeps each step's graph until it is reset
        "import torch\nrunning_loss = 0\nfor idx, batch in enumerate(dataloader):\n"
        "    loss = self._loss_fn(self._model(batch), batch['labels'])\n"
        "    loss = loss / self._gradient_accumulation_steps\n    running_loss += loss\n"
        "    loss.backward()",
        # reset every epoch, not every step: every step's graph is kept until the print
        "import torch\nfor epoch in range(10):\n    total_loss = 0\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n"
        "        loss.backward()\n        total_loss += loss\n"
        "    print(total_loss / len(loader))",
        # a PPO rollout: the values are detached before any backward, kept for nothing
        "import torch\nwhile frame_idx < max_frames:\n    values = []\n"
        "    for step in range(num_steps):\n        dist, value = model(state)\n"
        "        values.append(value)\n    values = torch.cat(values).detach()\n"
        "    ppo_update(states, values)",
        # emptied only every 100 steps (under an if): 100 graphs at a time, for a print
        "import torch\nwindow = []\nfor step, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y)\n    loss.backward()\n    window.append(loss)\n"
        "    if step % 100 == 99:\n        print(torch.stack(window).mean().item())\n"
        "        window.clear()",
        # `loss` reused after its backward: the later read does not consume the list
        "import torch\nfor epoch in range(10):\n    losses = []\n    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n"
        "        loss.backward()\n        losses.append(loss)\n"
        "    loss = torch.stack(losses).mean()\n    print(loss.item())",
        # a helper defined further down that returns the loss itself
        "import torch\ntrain_losses = []\nfor x, y in loader:\n"
        "    train_losses.append(compute_step(model(x), y))\n"
        "def compute_step(out, y):\n    return criterion(out, y)",
        # returned, but summed over the batches of a loader: every batch's graph until then
        "import torch\ndef epoch_outputs(model, loader):\n    outs = []\n"
        "    for x, _ in loader:\n        outs.append(model(x))\n    return outs",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.values = AutogradValues(ctx)
        self.stores = ctx.shared(StoresAt)
        self.index = ModuleIndex.of(ctx)
        self.frames: list[Frame] = []
        self.pending: list[tuple[Frame, KeptStore]] = []
        self.module: cst.Module | None = None
        #: loops whose body runs a backward or an optimizer step: training steps
        self.training_loops: set[int] = set()
        self.top_level: set[str] = set()
        self.across = AcrossCalls(ctx, self.values)  # what methods keep on their object

    # -- frames: one per function, and the module ---------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self.module = node
        self.frames.append(Frame(node, model_code=False))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.frames.append(Frame(node, model_code=is_forward_code(node, self.ctx)))
        if isinstance(self.ctx.parent, cst.Module):
            self.top_level.add(node.name.value)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.values.note_import(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.values.note_function_end(node.name.value)
        self._settle(self.frames.pop())

    def _settle(self, frame: Frame) -> None:
        if frame.model_code and not frame.calls_backward:
            return  # a forward pass builds its graph on purpose
        self.pending.extend((frame, store) for store in frame.stores)

    def finish(self) -> None:
        while self.frames:
            self._settle(self.frames.pop())
        self._publish_results()
        self.across.publish(self.index)
        if not self.reporting:
            return  # walked for what its functions return, for other files
        for node, text, statement, unless in self.across.reports(UnlessProjectOnCpu.here(self.ctx)):
            self.report(node, text, statement, unless)
        judged = []
        for frame, store in self.pending:
            value = self.values.settled(store.value)
            if not value.history:
                continue  # e.g. a helper defined further down returns floats
            if self.index.runs_grad_off(frame.node):
                continue  # every caller here runs it under no_grad: nothing had history
            if store.local and (store.one_step or
                                not any(map(self._across_batches, store.outlived))):
                continue  # one call's terms, or the micro-batches of its one optimizer step
            judged.append((frame, store, value))
        if not judged:
            return
        assert self.module is not None  # set by visit_Module, before any store
        flows = BackwardFlows(self.module, self.ctx.names,
                              {id(store.statement) for _, store, _ in judged})
        for frame, store, value in judged:
            outlived = [loop for loop in store.outlived
                        if store.container not in flows.reset_every_iteration(loop)]
            if not outlived:
                continue  # emptied every iteration of the loop it grows in
            if not any(map(is_data_loop, outlived)) and (
                    not frame.calls_backward or store.bound_per_step):
                # loss terms summed over heads or scales, for a backward elsewhere; or
                # a list made afresh every epoch that grows over the models or
                # layers of one step only: its size is the model's, not the data's
                continue
            if flows.consumed(frame.node, store.container, store.statement):
                continue  # kept for a backward that follows
            if kept_for_its_data(store, value, flows, frame.node, self.training_loops):
                continue
            fix = detach_fix(store.stored, store.container, store.verb, store.local, frame.node)
            self.report(store.node, message(store.stored, value, code(store.target), store.verb,
                                            fixed=fix is not None, freed=store.after_backward),
                        store.statement, self._unless(store), fix=fix)

    def _unless(self, store: KeptStore) -> Condition:
        """A CPU-only project keeps no GPU memory; a value whose history only
        an imported function's name suggests waits on what that function returns;
        an element of a model's output, on what the program's models put there."""
        unless: Condition = UnlessProjectOnCpu.here(self.ctx)
        value = store.value
        imported = self.values.imported_waits(value)
        collector = FactCollector.of(self.ctx)
        if store.forward_element is not None and collector is not None:
            unless = Either((unless, UnlessForwardsGiveNoHistoryAt(
                collector.facts.module, *store.forward_element)))
        if not imported or collector is None or \
                self.values.settled(value, trust_imported_names=False).history:
            return unless
        module = collector.facts.module
        functions = tuple(sorted({f for f in imported if f[0]}))
        methods = tuple(sorted({name for owner, name in imported if not owner}))
        if functions:
            unless = Either((unless, UnlessImportedFunctionsKeepNoHistory(module, functions)))
        if methods:
            unless = Either((unless, UnlessProgramMethodsKeepNoHistory(module, methods)))
        return unless

    def _publish_results(self) -> None:
        """Tell the project what this module's functions return (for other files)."""
        collector = FactCollector.of(self.ctx)
        if collector is None or not self.top_level:
            return
        results = self.values.function_results()
        collector.facts.returns.update(
            (name, results[name]) for name in self.top_level if name in results)

    def _across_batches(self, loop: Loop) -> bool:
        """A loop over batches, epochs or training steps (its body runs a
        backward or an optimizer step), not over the time steps, feature
        levels or items of one batch."""
        return id(loop) in self.training_loops or reads_across_batches(loop)

    # -- what functions return -------------------------------------------------
    def visit_Return(self, node: cst.Return) -> None:
        function = self.ctx.function
        if function is not None:
            self.values.note_return(function.name.value, node.value)

    # -- stores ----------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self._note_backward(node)
        self.across.note_call(node, self.frames[-1])
        for store in self.stores(node):
            self._check_store(store)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for store in self.stores(node):
            self._check_store(store)

    def visit_Assign(self, node: cst.Assign) -> None:
        for store in self.stores(node):
            self._check_store(store)
        if self.frames:
            self.frames[-1].after_assign(node, self.ctx)

    def _check_store(self, store: Store) -> None:
        node, container, stored, verb, chain_of = store
        if self.ctx.grad_disabled or not self.ctx.names.imports("torch") \
                or self.across.check(store, self.statement) or not self.ctx.in_loop \
                or self.frames[-1].holds_numbers(stored):
            return
        owner = container_name(container)
        if owner is None:
            return
        outlived = outlived_loops(self.ctx, owner)
        if not outlived:
            return
        if chain_of is not None and self.values.depends_on(stored, dotted_name(chain_of) or owner):
            return  # `x = x + block(x)`: a computation chain, not an accumulation
        value, frame = self.values.value_of(stored), self.frames[-1]
        if not value.history and self.values.kept_backpropagated(stored, frame.backpropagated):
            value = HISTORY_SCALAR  # `loss.backward()`, then `total += loss` (or a term of it)
        if not value.history and not value.waits:
            return
        if value.host:
            return  # a forward on the CPU: the graphs kept are in host memory, not on a GPU
        local = isinstance(self.ctx.scope.node, cst.FunctionDef) and "." not in owner and \
            owner in self.ctx.scope.bindings
        site = self.ctx.binding_site(owner)
        per_step = site is not None and any(map(is_data_loop, site.loops))
        frame.stores.append(KeptStore(node, self.statement(), stored, value, container, verb,
                                      owner, outlived, local, per_step,
                                      self.values.forward_element(stored),
                                      after_backward=freed_by_backward(stored, frame)))

    # -- a backward in this function ------------------------------------------
    def _note_backward(self, node: cst.Call) -> None:
        method, frame = node.func if type(node.func) is cst.Attribute else None, self.frames[-1]
        qualified = self.ctx.qualify(node.func)
        if (method is not None and method.attr.value in BACKWARD_METHODS) or \
                qualified in AUTOGRAD_ENTRY:
            frame.run_backward(backpropagated(node, qualified), node)
            frame.backward_loops.update(map(id, self.ctx.loops))
            self.training_loops.update(map(id, self.ctx.loops))
        elif method is not None and steps_an_optimizer(method):
            self.training_loops.update(map(id, self.ctx.loops))
            done = frame.backward_loops = frame.backward_loops - set(map(id, self.ctx.loops))
            for store in frame.stores:  # the micro-batches of one step
                store.one_step |= all(id(loop) in done for loop in store.outlived)
