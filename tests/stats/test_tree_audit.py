"""The unit audit of tree and staged rules: exact rules pass, each mutant fails, the lossy-by-design
one is labelled so (a reduced budget: two families, 300 trials)."""

from __future__ import annotations

import pytest
import torch

from specaudit.contracts.status import CheckStatus
from specaudit.errors import InputError
from specaudit.selftest.tree_mutants import STAGED_MUTANTS, TREE_MUTANTS
from specaudit.stats.tree_audit import audit_staged, audit_tree, tree_acceptance

BUDGET = dict(families=("dirichlet", "peaked"), trials=300, seed=4)


@pytest.mark.parametrize("name", list(TREE_MUTANTS))
def test_tree_rules(name):
    result = audit_tree(TREE_MUTANTS[name], branching="2,2,1", **BUDGET)
    if name.startswith("correct"):
        assert result.verdict is CheckStatus.PASS and result.finding == "no violation found"
    else:
        assert result.verdict is CheckStatus.FAIL
        assert result.finding == ("lossy by design" if name == "typical_acceptance" else "broken")
    assert result.samples > 0 and set(result.table["depth"]) >= {1, 2}


@pytest.mark.parametrize("name", list(STAGED_MUTANTS))
def test_staged_rules(name):
    result = audit_staged(STAGED_MUTANTS[name], k=3, k_small=2, **BUDGET)
    assert (result.verdict is CheckStatus.PASS) is name.startswith("correct")


def test_tree_acceptance_in_closed_form():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    beta = float(torch.minimum(p, q).sum())
    assert tree_acceptance(p, q, 1, "sampled") == pytest.approx(beta)
    # the second sibling meets the residual (0.3/0.3, 0, 0) -> (1, 0, 0) with q: min sum 0.2
    assert tree_acceptance(p, q, 2, "sampled") == pytest.approx(1 - (1 - beta) * (1 - 0.2))
    assert tree_acceptance(p, q, 2, "top-k") == pytest.approx(0.5)  # q's top two: tokens 2 and 1


def test_bad_budgets_are_one_sentence():
    with pytest.raises(InputError, match="trials"):
        audit_tree(TREE_MUTANTS["correct-sampled"], trials=0)
    with pytest.raises(InputError, match="--tree"):
        audit_tree(TREE_MUTANTS["correct-sampled"], branching="2,x")
    with pytest.raises(InputError, match="families"):
        audit_staged(families=("nope",))
