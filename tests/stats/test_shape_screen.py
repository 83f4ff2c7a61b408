"""The screen's expectation for a tree shape: the path-conditional acceptance and its dynamic
programme against the tree engine's own walk, by simulation; the chain as its one-child case."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specaudit.decoding.tree import REFERENCE_RULES, TokenTree, draw_children, verify_tree
from specaudit.stats.acceptance import expected_counts, position_acceptance
from specaudit.stats.shape_screen import expected_shape_counts, tree_accept_cond

T, V = 7, 6


def _laws(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and draft laws per absolute output position (a model whose distributions depend on
    the position only), Dirichlet so that the draft's top-k has no ties."""
    rng = np.random.default_rng(seed)
    p = torch.tensor(rng.dirichlet(np.ones(V), size=T + 4))
    q = torch.tensor(rng.dirichlet(np.ones(V) * 0.7, size=T + 4))
    return p, q


def _run(
    p: torch.Tensor, q: torch.Tensor, branching: tuple[int, ...], mode: str, generator: torch.Generator
) -> tuple[list[int], list[int], list[int]]:
    """One tree decoding of T tokens on position-only laws: the path, accepted and offered per step."""
    tokens, accepted, offered = [], [], []
    while len(tokens) < T:
        start, depth = len(tokens), min(len(branching), T - len(tokens) - 1)
        tree = TokenTree()
        for d in range(depth):
            for node in tree.at_depth(d):
                for token in draw_children(q[start + d], branching[d], mode, generator):
                    tree.add(node, token)
        step = verify_tree(tree, q, p, REFERENCE_RULES[mode], generator, rows=[start + d for d in tree.depths])
        tokens += step.emitted
        accepted.append(step.accepted)
        offered.append(depth)
    return tokens[:T], accepted, offered


@pytest.mark.parametrize("mode,branching", [("sampled", (3, 2, 1)), ("top-k", (2, 2, 1))])
def test_tree_expectation_matches_the_engine_walk(mode, branching):
    """Per run, the programme's expectation given the run's own path against what the run did:
    their difference has mean 0 for steps and for each depth's reached and accepted counts
    (checked within 4.5 standard errors over 800 runs; with top-k children the acceptances given
    the path are certain, so there the difference is 0 run by run)."""
    p, q = _laws(3)
    generator = torch.Generator().manual_seed(7)
    differences, steps = [], []
    for _ in range(800):
        path, accepted, offered = _run(p, q, branching, mode, generator)
        rows = [tree_accept_cond(p[:T], q[:T], torch.tensor(path), b, mode).tolist() for b in branching]
        expected = expected_shape_counts(rows, T)
        reached_at = [sum(min(a + 1, o) > d for a, o in zip(accepted, offered)) for d in range(len(branching))]
        accepted_at = [sum(a > d for a in accepted) for d in range(len(branching))]
        steps.append(len(accepted))
        differences.append(
            [len(accepted) - expected.steps, *np.subtract(reached_at, expected.reached_at), *np.subtract(accepted_at, expected.accepted_at)]
        )
    differences = np.array(differences)
    mean, se = differences.mean(axis=0), differences.std(axis=0, ddof=1) / np.sqrt(len(differences))
    assert np.all(np.abs(mean) <= 4.5 * se + 1e-9), (mean, se)
    assert np.std(steps) > 0  # the runs did vary: the check had something to test


def test_one_child_is_the_chain():
    """A one-child tree is the chain: a_t = min(1, q/p), and the programme's counts are the chain's."""
    p, q = _laws(5)
    path = torch.tensor([0, 3, 1, 1, 5, 2, 4])
    chain = position_acceptance(p[:T], q[:T], path)[1]
    assert torch.allclose(tree_accept_cond(p[:T], q[:T], path, 1), chain)
    rows = [chain.tolist()] * 4
    shape = expected_shape_counts(rows, max_new_tokens=T)
    steps, proposed, accepted, _ = expected_counts(chain.tolist(), 4, T)
    assert (shape.steps, shape.proposed, shape.accepted) == pytest.approx((steps, proposed, accepted))
    assert shape.tokens == pytest.approx(T)


def test_screen_records_the_tree_expectation_chunked_or_whole():
    """The screen's tree expectation is the same whether the draft's logits come a few positions
    at a time or all at once, and is computed only when asked for."""
    from specaudit.decoding import SamplingSpec
    from specaudit.engines.screen import screen_paths
    from specaudit.models import tiny_draft_of, tiny_model, tiny_tokenizer

    target = tiny_model()
    draft, tokenizer = tiny_draft_of(target, noise=0.3), tiny_tokenizer()
    prompts = [tokenizer(text)["input_ids"] for text in ("Hello there, how are you?", "List three fruits.", "Hi")]
    common = dict(spec=SamplingSpec(1.0), k=3, max_new_tokens=10, eos_ids={2}, vocab_size=target.config.vocab_size, pad_id=0)
    tree = ((3, 1), "sampled")
    whole = screen_paths(target, draft, prompts, [1, 2, 3], chunk_elements=None, tree=tree, **common)
    chunked = screen_paths(target, draft, prompts, [1, 2, 3], chunk_elements=2 * target.config.vocab_size, tree=tree, **common)
    for a, b in zip(whole, chunked, strict=True):
        assert a.tree is not None and b.tree is not None
        # equal to float rounding (the residual chain sums V terms per child: measured 2e-9)
        flat = [np.hstack([np.ravel(v) for v in dataclasses.astuple(path.tree)]) for path in (a, b)]
        np.testing.assert_allclose(flat[0], flat[1], rtol=1e-6, atol=1e-9)
        assert 1.0 <= a.tree.tokens_per_step <= 3.0 and a.tree.tokens == len(a.tokens)
    plain = screen_paths(target, draft, prompts, [1, 2, 3], **common)
    assert all(path.tree is None for path in plain)  # asked for nothing, nothing computed
