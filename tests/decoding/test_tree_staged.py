"""Tree and staged speculative sampling: the one-pass tree mask, the exactness of each rule by
enumeration and by sampling, the engines against plain decoding, and their records."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from specaudit.decoding import SamplingSpec, vanilla_generate
from specaudit.decoding._shapes import parse_branching, parse_levels, tree_size
from specaudit.decoding.staged import staged_generate, staged_step
from specaudit.decoding.tree import (
    REFERENCE_RULES,
    TokenTree,
    _Scorer,
    draw_children,
    multi_step_verify,
    recursive_rejection_verify,
    tree_generate,
    verify_tree,
)
from specaudit.errors import InputError
from specaudit.models import NgramDraft
from specaudit.selftest.tree_mutants import siblings_without_residual

P = torch.tensor([0.45, 0.3, 0.15, 0.1], dtype=torch.float64)
Q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)


def _within(counts: np.ndarray, law: np.ndarray, n: int) -> bool:
    """Every token's frequency within 4.5 binomial standard errors of its law (a false alarm on
    a 4-token law: below 4 x 7e-6)."""
    se = np.sqrt(law * (1 - law) / n)
    return bool(np.all(np.abs(counts / n - law) <= 4.5 * se + 1e-12))


def _mss_law(p: np.ndarray, q: np.ndarray, siblings: tuple[int, ...], residual_update: bool = True) -> np.ndarray:
    """The emitted token's law given the siblings, written out from the rule's definition."""
    out, reach, r = np.zeros_like(p), 1.0, p.copy()
    for x in siblings:
        a = min(1.0, r[x] / q[x])
        out[x] += reach * a
        reach *= 1 - a
        if residual_update:
            rest = np.clip(r - q, 0, None)
            r = rest / rest.sum() if rest.sum() > 0 else r
    final = r if residual_update else np.clip(p - q, 0, None) / np.clip(p - q, 0, None).sum()
    return out + reach * final


@pytest.mark.parametrize("siblings", [1, 2, 3])
def test_multi_step_sampling_is_exact_by_enumeration(siblings):
    p, q = P.numpy(), Q.numpy()
    law = sum(np.prod([q[x] for x in xs]) * _mss_law(p, q, xs) for xs in itertools.product(range(4), repeat=siblings))
    assert np.allclose(law, p, atol=1e-12)
    # the mutant's law, by the same enumeration, is not p: the audit has something to find
    broken = sum(
        np.prod([q[x] for x in xs]) * _mss_law(p, q, xs, residual_update=False) for xs in itertools.product(range(4), repeat=siblings)
    )
    assert siblings == 1 or np.abs(broken - p).sum() > 0.05


def test_top_k_recursive_rejection_is_exact_by_enumeration():
    # deterministic candidates: kept c with probability p(c), else p outside them
    for k in (1, 2, 3):
        top = [3, 2, 1][:k]
        law = np.zeros(4)
        reach, r = 1.0, P.numpy().copy()
        for c in top:
            law[c] += reach * r[c]
            reach *= 1 - r[c]
            r[c] = 0.0
            r = r / r.sum()
        law += reach * r
        assert np.allclose(law, P.numpy(), atol=1e-12)


@pytest.mark.parametrize(
    "rule, children", [(multi_step_verify, "sampled"), (recursive_rejection_verify, "top-k"), (siblings_without_residual, "sampled")]
)
def test_node_rules_sampled_against_the_target(rule, children):
    n = 4000  # the mutant sits 7 to 27 standard errors off p at this size (enumerated above)
    generator = torch.Generator().manual_seed(5)
    counts = np.zeros(4)
    for _ in range(n):
        tokens = draw_children(Q, 3, children, generator)
        counts[rule(tokens, Q, P, generator).token] += 1
    assert _within(counts, P.numpy(), n) is (rule is not siblings_without_residual)


def test_tree_walk_emits_each_depth_from_its_target_law():
    """Depth-only laws, tree (2, 2): the first token follows p_1, the second (where reached) p_2."""
    p = torch.tensor([[0.45, 0.3, 0.15, 0.1], [0.1, 0.1, 0.2, 0.6], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]], dtype=torch.float64)
    generator = torch.Generator().manual_seed(2)
    for children in ("sampled", "top-k"):
        n, first, second, reached = 2500, np.zeros(4), np.zeros(4), 0
        for _ in range(n):
            tree = TokenTree()
            for depth, count in enumerate((2, 2)):
                for node in tree.at_depth(depth):
                    for token in draw_children(q[depth], count, children, generator):
                        tree.add(node, token)
            step = verify_tree(tree, q, p, REFERENCE_RULES[children], generator, rows=tree.depths)
            first[step.emitted[0]] += 1
            if len(step.emitted) > 1:
                second[step.emitted[1]] += 1
                reached += 1
        assert _within(first, p[0].numpy(), n)
        assert _within(second, p[1].numpy(), reached)


def test_staged_step_follows_the_target_and_the_small_q_check_does_not():
    from specaudit.selftest.tree_mutants import STAGED_MUTANTS

    p = torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float32)
    small = torch.tensor([[0.05, 0.05, 0.1, 0.8]], dtype=torch.float32)
    medium = (p[:1] + small) / 2
    generator = torch.Generator().manual_seed(3)
    n = 4000  # the small-q check puts token 3 at 0.056 instead of 0.1: 9 standard errors at this size
    for name, expected in (("correct-staged", True), ("staged_small_q", False)):
        counts = np.zeros(4)
        for _ in range(n):
            counts[int(staged_step(small, medium, p, 1, generator, STAGED_MUTANTS[name])[0])] += 1
        assert _within(counts, p[0].double().numpy(), n) is expected, name


def test_tree_mask_gives_each_node_the_logits_of_its_chain(tiny_pair):
    target = tiny_pair.target
    context = [1, 5, 7, 9, 11, 13]
    generator = torch.Generator().manual_seed(0)
    tree = TokenTree()
    for depth, count in enumerate((2, 2, 1)):
        for node in tree.at_depth(depth):
            for token in torch.randint(3, 60, (count,), generator=generator).tolist():
                tree.add(node, token)
    scorer = _Scorer(target, torch.device("cpu"))
    scorer.logits(context[:3], TokenTree(), tiny_pair.vocab_size)  # part of the context cached first
    logits = scorer.logits(context, tree, tiny_pair.vocab_size)
    assert scorer.cache.get_seq_length() == len(context)  # the nodes left the cache
    with torch.inference_mode():
        for node in range(len(tree.tokens)):
            path = [tree.tokens[a] for a in reversed(tree.ancestors(node))]
            chain = target(input_ids=torch.tensor([context + path])).logits[0, -1, : tiny_pair.vocab_size]
            assert torch.allclose(logits[node], chain, atol=1e-4), node


@pytest.mark.parametrize("children", ["sampled", "top-k"])
def test_greedy_tree_equals_greedy_decoding(tiny_pair, children):
    spec = SamplingSpec(temperature=0.0)
    common = dict(spec=spec, max_new_tokens=24, eos_ids={2}, vocab_size=tiny_pair.vocab_size)
    plain = vanilla_generate(tiny_pair.target, [1, 8, 9, 10], generator=torch.Generator().manual_seed(0), **common)
    tree = tree_generate(
        tiny_pair.target,
        tiny_pair.draft,
        [1, 8, 9, 10],
        branching=(2, 2, 1),
        children=children,
        generator=torch.Generator().manual_seed(0),
        **common,
    )
    assert tree.tokens == plain.tokens


def test_greedy_staged_equals_greedy_decoding(tiny_pair):
    spec = SamplingSpec(temperature=0.0)
    common = dict(spec=spec, max_new_tokens=24, eos_ids={2}, vocab_size=tiny_pair.vocab_size)
    plain = vanilla_generate(tiny_pair.target, [1, 8, 9, 10], generator=torch.Generator().manual_seed(0), **common)
    for small in (NgramDraft(), tiny_pair.draft):
        staged = staged_generate(
            tiny_pair.target,
            small,
            tiny_pair.draft,
            [1, 8, 9, 10],
            k_small=2,
            k_medium=3,
            generator=torch.Generator().manual_seed(0),
            **common,
        )
        assert staged.tokens == plain.tokens


def test_sampled_records_are_consistent(tiny_pair):
    common = dict(spec=SamplingSpec(temperature=1.0), max_new_tokens=20, eos_ids={2}, vocab_size=tiny_pair.vocab_size)
    tree = tree_generate(
        tiny_pair.target,
        tiny_pair.draft,
        [1, 8, 9],
        branching=(3, 2, 1),
        children="sampled",
        generator=torch.Generator().manual_seed(1),
        **common,
    )
    staged = staged_generate(
        tiny_pair.target,
        tiny_pair.draft,
        tiny_pair.draft,
        [1, 8, 9],
        k_small=2,
        k_medium=4,
        generator=torch.Generator().manual_seed(1),
        **common,
    )
    for generation in (tree, staged):
        assert len(generation.step_pit) == len(generation.tokens)
        assert sum(generation.proposed_per_step) == generation.proposed
        assert all(a <= k for a, k in zip(generation.accepted_per_step, generation.proposed_per_step))
        assert sum(a + 1 for a in generation.accepted_per_step) >= len(generation.tokens)
        assert all(0.0 <= b <= 1.0 for step in generation.accept_prob for b in step)
        assert all(0.0 <= f <= 1.0 and 0.0 <= F <= 1.0 for F, f in generation.step_pit)
    assert tree.extra["tree_nodes_per_step"][0] == tree_size((3, 2, 1))
    assert [level["level"] for level in staged.extra["levels"]] == ["small -> medium", "medium -> target"]


def test_shapes_are_parsed_or_refused_in_one_sentence():
    assert parse_branching("3,2,1") == (3, 2, 1) and tree_size((3, 2, 1)) == 15
    assert parse_levels("ngram,int8", "4,2") == (("ngram", 4), ("int8", 2))
    for bad in ("3,0", "a", "", "9,9,9"):
        with pytest.raises(InputError, match="--tree"):
            parse_branching(bad)
    with pytest.raises(InputError, match="medium level must be a model"):
        parse_levels("int8,ngram", "4,4")
    with pytest.raises(InputError, match="--level-k"):
        parse_levels("ngram,int8", "4")
    assert math.isclose(tree_size((2, 2, 1)), 10)


def test_a_level_is_the_runs_draft_by_name_or_as_draft(tiny_pair):
    from specaudit.config import RunConfig
    from specaudit.engines.beyond_chains import level_model

    cfg = RunConfig(draft="some/draft", engines="vanilla,staged", levels="ngram,draft")
    assert level_model(tiny_pair, "draft", cfg) is tiny_pair.draft
    assert level_model(tiny_pair, "some/draft", cfg) is tiny_pair.draft
    assert isinstance(level_model(tiny_pair, "ngram", cfg), NgramDraft)
    with pytest.raises(InputError, match="a level is ngram, int8, early-exit:N, target, or draft"):
        level_model(tiny_pair, "medium", cfg)


def test_a_run_says_what_each_engine_offers_per_step():
    from specaudit.decoding._shapes import describe_steps

    assert describe_steps({"engines": ["screen", "vanilla", "speculative"], "k": 4}) == "chain, k = 4"
    both = {"engines": ["vanilla", "speculative", "hf-assisted", "tree", "staged"], "k": 3, "tree": "2,2,1", "levels": "ngram,draft"}
    assert describe_steps({**both, "level_k": "2,3"}) == "chain, k = 3; tree 2,2,1, sampled children; staged ngram:2 -> draft:3 -> target"
    assert describe_steps({"engines": ["vanilla"], "k": 4}) == "chain, k = 4"
    assert describe_steps({"engines": "vanilla,staged", "levels": "ngram,int8", "level_k": "4,4"}) == "staged ngram:4 -> int8:4 -> target"


def test_run_config_checks_the_shapes():
    from specaudit.config import RunConfig

    with pytest.raises(InputError, match="--tree-children"):
        RunConfig(engines="vanilla,tree", tree_children="beam")
    assert RunConfig(engines="vanilla,tree", tree="2,2,1").decoding_identity()["tree"] == "2,2,1"
    assert "tree" not in RunConfig(engines="vanilla,speculative").decoding_identity()
