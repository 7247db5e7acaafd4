"""Every rule's code, name, default severity and text screen, in one table
that imports nothing heavy: the engine screens files, the configuration
checks codes and the reporters name rules from it, and imports the rule
classes (and libcst) only for a file that must be parsed. Each rule class
takes its name, severity and keywords from its entry here."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from memlint.analysis.screens import SELECTION_MARKERS, may_select_and_use_default_device


class RuleEntry(NamedTuple):
    code: str
    name: str
    #: "error" (a leak, a crash, a call with no effect), "warning" (memory that
    #: grows with the data or the model) or "note" (speed): the default, which
    #: `[tool.memlint.severity]` overrides; `--fail-on` decides the exit code
    severity: str
    #: the file is only parsed for this rule if its text contains one of these
    keywords: tuple[str, ...]
    #: the module under memlint/rules that holds the rule's class
    module: str
    #: a screen that needs more than one keyword: (text, lower-cased text) -> bool
    screen: Callable[[str, str], bool] | None = None

    def wants(self, source: str, lowered: str) -> bool:
        """Whether the file's text could hold a finding of this rule."""
        if self.screen is not None:
            return self.screen(source, lowered)
        return any(k in source for k in self.keywords)


CATALOGUE: tuple[RuleEntry, ...] = (
    RuleEntry("MEM001", "whole-dataset-to-device", "warning", ("cuda", "dev", ".to("),
              "whole_dataset_to_device"),
    RuleEntry("MEM002", "cuda-in-data-worker", "error",
              ("Dataset", "DataLoader", "collate_fn", "worker_init_fn"), "cuda_in_data_worker"),
    RuleEntry("MEM003", "tensor-history-kept", "error", ("for ", "while "),
              "tensor_history_kept"),
    RuleEntry("MEM004", "grad-in-inference", "warning",
              ("eval", "test", "valid", "predict", "infer", "generat", "sampl", "volatile"),
              "grad_in_inference"),
    RuleEntry("MEM005", "dataloader-without-pin-memory", "note", ("DataLoader",),
              "dataloader_without_pin_memory"),
    RuleEntry("MEM006", "grad-mode-not-entered", "error",
              ("no_grad", "inference_mode", "enable_grad"), "grad_mode_not_entered"),
    RuleEntry("MEM007", "load-without-map-location", "warning",
              ("load", "save"),  # saves too: what a file saves tells the loads of others
              "load_without_map_location"),
    RuleEntry("MEM008", "implicit-default-gpu", "warning",
              SELECTION_MARKERS,  # lower-cased, and a default-device use too
              "implicit_default_gpu", may_select_and_use_default_device),
    RuleEntry("MEM009", "hook-keeps-activations", "error",
              ("register_forward_hook", "register_full_backward_hook", "register_backward_hook",
               "register_forward_pre_hook", "register_hook"), "hook_keeps_activations"),
    RuleEntry("MEM010", "predictions-kept-on-gpu", "warning",
              ("append", "extend", "insert", "cat(", "stack(", "concat"),
              "predictions_kept_on_gpu"),
)
ENTRIES_BY_CODE: dict[str, RuleEntry] = {entry.code: entry for entry in CATALOGUE}
