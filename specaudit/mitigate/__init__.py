"""Close the gap an audit finds: per-group draft length and routing policies for any draft,
a better draft distilled on the target's own samples (weighted toward disadvantaged groups)
where the draft is trainable, and a re-audit on held-out prompts. `measure_acceptance` is the
one acceptance measurement of a draft before and after training; without training the
policies read the audit's own records (specaudit.mitigate._routing)."""

import sys
import types
from typing import Any

from specaudit.mitigate._acceptance import PromptAcceptance, TargetSample, measure_acceptance, sample_target
from specaudit.mitigate._distil import OBJECTIVES, WEIGHTINGS, distil, group_weights, mean_objective, sequence_weights
from specaudit.mitigate._mitigate import DEMO_BUDGET, QUICK_BUDGET, MitigationResult, mitigate, split_by_pair
from specaudit.mitigate._policy import group_policy, measure_cost_ratio, policy_document

__all__ = [
    "DEMO_BUDGET",
    "OBJECTIVES",
    "QUICK_BUDGET",
    "WEIGHTINGS",
    "MitigationResult",
    "PromptAcceptance",
    "TargetSample",
    "distil",
    "group_policy",
    "group_weights",
    "mean_objective",
    "measure_acceptance",
    "measure_cost_ratio",
    "mitigate",
    "policy_document",
    "sample_target",
    "sequence_weights",
    "split_by_pair",
]


class _CallableModule(types.ModuleType):
    """`specaudit.mitigate` names both this package and the public function: importing the
    package rebinds the attribute to the module, so the module itself calls `mitigate`."""

    def __call__(self, *args: Any, **kwargs: Any) -> MitigationResult:
        return mitigate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
