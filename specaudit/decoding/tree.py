"""Token-tree speculative sampling: a static tree of draft tokens verified in one target pass.

The tree's shape is its branching per depth: (3, 2, 1) puts 3 children under the root, 2 under
each of those and 1 under each of those (3 + 6 + 6 = 15 nodes, depth 3). A node's children are
drawn from the draft's distribution q at that node in one of two ways, and each way has its own
exact verification rule, applied node by node from the root down:

- "sampled": children i.i.d. from q, verified by multi-step speculative sampling (SpecInfer,
  Miao et al. 2024): try the siblings in order, accepting x_i with probability
  min(1, r_i(x_i) / q(x_i)) where r_1 = p and, after each rejection, r_{i+1} = norm(max(0, r_i − q));
  if all are rejected the token is drawn from the last residual. Each try is an ordinary
  rejection step of r_i against q, so the emitted token follows p.
- "top-k": the draft's k most likely tokens (distinct, deterministic given the context),
  verified by recursive rejection sampling (Jeon et al. 2024) with the proposal law of each
  candidate: a point mass, so candidate c_i is accepted with probability r_i(c_i) and a
  rejection removes c_i from r (r_{i+1} = r_i without c_i, renormalised). The token accepted is c
  with probability p(c); all rejected, it is drawn from p outside the candidates.

An accepted child becomes the node the next depth is verified at; a rejection (a correction
token) or a leaf (a bonus token from p) ends the step. The target scores every node of the tree
in one forward pass: a 4-D attention mask lets each node see the context and its own ancestors
only, with position ids by depth, so each node's logits are those of the chain context + path
(tested against a plain causal pass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from specaudit.decoding._generation import Generation, end_step, record_step
from specaudit.decoding._shapes import parse_children
from specaudit.decoding.speculative import crop_cache
from specaudit.decoding.verify import mass_before, sample_from
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.models import NgramDraft, Stopwatch, forward_cached


@dataclass
class TokenTree:
    """Node 0 is the root (the context's last position, no token); every other node is a drafted
    token with its parent's index; `children[n]` lists node n's children in the order they are tried."""

    tokens: list[int] = field(default_factory=lambda: [-1])
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    children: list[list[int]] = field(default_factory=lambda: [[]])

    def add(self, parent: int, token: int) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.children.append([])
        self.children[parent].append(len(self.tokens) - 1)
        return len(self.tokens) - 1

    def at_depth(self, depth: int) -> list[int]:
        return [n for n, d in enumerate(self.depths) if d == depth]

    def ancestors(self, node: int) -> list[int]:
        """node and its ancestors up to (not including) the root."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parents[node]
        return path


def draw_children(q: torch.Tensor, count: int, children: str, generator: torch.Generator, ranking: torch.Tensor | None = None) -> list[int]:
    """`count` child tokens of a node whose draft distribution is q: i.i.d. samples ("sampled"),
    or the `count` highest of `ranking` (default q; ties to the lower id) ("top-k")."""
    if children == "sampled":
        return torch.multinomial(q.float(), count, replacement=True, generator=generator).tolist()
    scores = q if ranking is None else ranking
    order = torch.sort(scores.double(), descending=True, stable=True).indices
    return order[:count].tolist()


@dataclass(frozen=True)
class NodeOutcome:
    """What verifying one node's children gave: the child accepted (index into its children) or
    None, the token emitted, the probability a correct verifier accepts some child given these
    children (`accept_prob`) and averaged over children draws (`beta`), and the law of the
    emitted token given its role (accepted, or the correction), for the step PIT."""

    child: int | None
    token: int
    accept_prob: float
    beta: float
    law: torch.Tensor


NodeRule = Callable[[list[int], torch.Tensor, torch.Tensor, torch.Generator], NodeOutcome]


def _uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, device=generator.device, dtype=torch.float64))


def _as_numpy(x: torch.Tensor) -> np.ndarray:
    """float64 NumPy copy of a distribution: a node's rule reads single entries, and NumPy's
    scalars cost a fraction of torch's per read (the unit audit runs thousands of trees)."""
    return x.detach().to("cpu", torch.float64).numpy()


def _normalised(x: np.ndarray) -> np.ndarray:
    total = x.sum()
    return x / total if total > 0 else x


def _residual(r: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, r − q)), or r itself where r <= q everywhere (then rejection cannot happen)."""
    rest = np.clip(r - q, 0.0, None)
    total = rest.sum()
    return rest / total if total > 0 else r


def _draw(law: np.ndarray, generator: torch.Generator, device: torch.device) -> int:
    return sample_from(torch.from_numpy(law).to(device), generator)


def multi_step_verify(tokens: list[int], q: torch.Tensor, p: torch.Tensor, generator: torch.Generator) -> NodeOutcome:
    """Multi-step speculative sampling of siblings drawn i.i.d. from q (module docstring)."""
    q64, residual = _as_numpy(q), _normalised(_as_numpy(p))
    ratios, betas, residuals = [], [], []
    for x in tokens:  # the residual chain does not depend on which token was rejected
        ratios.append(min(1.0, residual[x] / q64[x]) if q64[x] > 0 else 0.0)
        betas.append(float(np.minimum(residual, q64).sum()))
        residuals.append(residual)
        residual = _residual(residual, q64)
    chosen = None
    for i, x in enumerate(tokens):
        if _uniform(generator) * q64[x] < residuals[i][x]:
            chosen = i
            break
    weights, reach = np.zeros_like(q64), 1.0
    for x, a in zip(tokens, ratios):
        weights[x] += reach * a
        reach *= 1.0 - a
    beta_none = float(np.prod([1.0 - b for b in betas]))
    if chosen is None:
        token = _draw(residual, generator, p.device)
        return NodeOutcome(None, token, 1.0 - reach, 1.0 - beta_none, torch.from_numpy(residual))
    return NodeOutcome(chosen, tokens[chosen], 1.0 - reach, 1.0 - beta_none, torch.from_numpy(_normalised(weights)))


def recursive_rejection_verify(tokens: list[int], q: torch.Tensor, p: torch.Tensor, generator: torch.Generator) -> NodeOutcome:
    """Recursive rejection sampling of deterministic (top-k) candidates: each one's proposal law is
    a point mass, so candidate c is kept with probability r(c) and a rejection removes it from r."""
    base = _normalised(_as_numpy(p))
    residual = base
    candidates = np.zeros(base.shape, dtype=bool)
    candidates[list(set(tokens))] = True
    kept = float(base[candidates].sum())
    chosen = None
    for i, c in enumerate(tokens):
        if _uniform(generator) < residual[c]:
            chosen = i
            break
        point = np.zeros_like(residual)
        point[c] = 1.0
        residual = _residual(residual, point)
    if chosen is None:
        token = _draw(residual, generator, p.device)
        return NodeOutcome(None, token, kept, kept, torch.from_numpy(_normalised(np.where(candidates, 0.0, base))))
    return NodeOutcome(chosen, tokens[chosen], kept, kept, torch.from_numpy(_normalised(np.where(candidates, base, 0.0))))


@dataclass(frozen=True)
class TreeRule:
    """A verification rule for trees: how the children it verifies must be drawn, the rule applied
    at each node, and whether it is meant to keep the target's distribution (`lossy_by_design`:
    a heuristic such as Medusa's typical acceptance, which trades exactness for acceptance)."""

    name: str
    children: str
    verify_node: NodeRule
    lossy_by_design: bool = False


REFERENCE_RULES: dict[str, TreeRule] = {
    "sampled": TreeRule("multi-step speculative sampling", "sampled", multi_step_verify),
    "top-k": TreeRule("recursive rejection sampling", "top-k", recursive_rejection_verify),
}
"""The exact rule for each way of drawing children."""


@dataclass
class TreeStep:
    """One verified tree: tokens emitted (accepted path, then a correction or bonus token), their
    laws given their roles, and per drafted depth reached: acceptance probabilities."""

    emitted: list[int]
    accepted: int
    laws: list[torch.Tensor]
    accept_prob: list[float]
    beta: list[float]


def verify_tree(
    tree: TokenTree,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    rule: TreeRule,
    generator: torch.Generator,
    rows: Sequence[int] | None = None,
) -> TreeStep:
    """Walk the tree from the root with `rule`. q and p of node n are rows `rows[n]` (default n)
    of `draft_probs` and `target_probs`: p is the target's distribution after the node's path,
    q the draft's, from which the node's children were drawn."""
    node, emitted, laws, accept_prob, beta = 0, [], [], [], []
    while True:
        row = node if rows is None else rows[node]
        kids = tree.children[node]
        if not kids:  # a leaf: the bonus token
            p = _normalised(_as_numpy(target_probs[row]))
            emitted.append(_draw(p, generator, target_probs.device))
            laws.append(torch.from_numpy(p))
            break
        outcome = rule.verify_node([tree.tokens[c] for c in kids], draft_probs[row], target_probs[row], generator)
        emitted.append(outcome.token)
        laws.append(outcome.law)
        accept_prob.append(outcome.accept_prob)
        beta.append(outcome.beta)
        if outcome.child is None:
            break
        node = kids[outcome.child]
    return TreeStep(emitted, len(emitted) - 1, laws, accept_prob, beta)


def tree_mask(tree: TokenTree, cached: int, tail: int) -> tuple[torch.Tensor, list[int]]:
    """Boolean attention mask [1, 1, tail + nodes, cached + tail + nodes] for a pass that feeds
    `tail` uncached context tokens then every non-root node, and their position ids: context rows
    are causal, a node sees the whole context, its ancestors and itself, at position
    context length − 1 + depth."""
    nodes = len(tree.tokens) - 1
    context = cached + tail
    mask = torch.zeros(tail + nodes, context + nodes, dtype=torch.bool)
    for i in range(tail):
        mask[i, : cached + i + 1] = True
    for n in range(1, nodes + 1):
        row = tail + n - 1
        mask[row, :context] = True
        for a in tree.ancestors(n):
            mask[row, context + a - 1] = True
    positions = list(range(cached, context)) + [context - 1 + d for d in tree.depths[1:]]
    return mask[None, None], positions


class _Scorer:
    """A model with a KV cache of the context: scores the context's last position and every node
    of a tree in one pass, then drops the nodes from the cache again."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.cache = DynamicCache(config=model.config)
        self.cached = 0

    def logits(self, context: list[int], tree: TokenTree, vocab_size: int) -> torch.Tensor:
        """[1 + nodes, V]: logits after the context (row 0, the root) and after each node's path."""
        tail = context[self.cached :]
        feed = tail + tree.tokens[1:]
        mask, positions = tree_mask(tree, self.cached, len(tail))
        # with the whole context cached (the draft past depth 1) the root's row is not computed:
        # its q was read in the first pass, and the row stays zeros here
        keep = len(tree.tokens) if tail else len(tree.tokens) - 1
        logits = forward_cached(
            self.model,
            torch.tensor([feed], device=self.device),
            self.cache,
            logits_to_keep=keep,
            attention_mask=mask.to(self.device),
            position_ids=torch.tensor([positions], device=self.device),
        )[0, :, :vocab_size]
        self.cached = len(context)
        crop_cache(self.cache, self.cached)  # tree nodes leave the cache; the accepted path is fed next step
        return logits if tail else torch.cat([logits.new_zeros((1, logits.shape[-1])), logits])


def build_tree(
    draft: _Scorer,
    context: list[int],
    branching: Sequence[int],
    children: str,
    spec: SamplingSpec,
    generator: torch.Generator,
    vocab_size: int,
) -> tuple[TokenTree, torch.Tensor]:
    """Grow the tree depth by depth with the draft (one pass per depth over the tree so far);
    returns it with q at every internal node (rows by node index; leaves' rows are unused zeros)."""
    tree = TokenTree()
    rows: dict[int, torch.Tensor] = {}
    for depth, count in enumerate(branching):
        logits = draft.logits(context, tree, vocab_size)
        for node in tree.at_depth(depth):
            raw = logits[node]
            q = warp(raw, spec)
            rows[node] = q
            for token in draw_children(q, count, children, generator, ranking=raw):
                tree.add(node, token)
    q_rows = torch.zeros((len(tree.tokens), vocab_size), device=generator.device)
    for node, q in rows.items():
        q_rows[node] = q
    return tree, q_rows


def tree_generate(
    target: torch.nn.Module,
    draft: torch.nn.Module | NgramDraft,
    prompt_ids: list[int],
    *,
    spec: SamplingSpec,
    branching: Sequence[int],
    children: str,
    max_new_tokens: int,
    generator: torch.Generator,
    eos_ids: set[int],
    vocab_size: int,
    rule: TreeRule | None = None,
) -> Generation:
    """Tree speculative decoding of one prompt. Per step: `proposed_per_step` is the tree's depth
    (positions offered), `accepted_per_step` the accepted path's length, `beta` / `accept_prob`
    the acceptance probability at each depth reached (averaged over children draws / given the
    children drawn), `extra["tree_nodes_per_step"]` the draft tokens the target verified."""
    if isinstance(draft, NgramDraft):
        raise InputError("--engines tree needs a model draft (int8, early-exit:N, a model), not the n-gram lookup")
    parse_children(children)
    rule = rule or REFERENCE_RULES[children]
    device = generator.device
    clock = Stopwatch(device)
    start = clock.now()
    target_scorer, draft_scorer = _Scorer(target, device), _Scorer(draft, device)
    context, tokens = list(prompt_ids), []
    result = Generation(tokens=tokens, finish_reason="", wall_s=0.0, ttft_s=0.0, steps=0)
    nodes_per_step: list[int] = []
    untimed = 0.0
    with torch.inference_mode():
        while True:
            step_start = clock.now()
            depth = max(0, min(len(branching), max_new_tokens - len(tokens) - 1))
            tree, q_rows = build_tree(draft_scorer, context, branching[:depth], children, spec, generator, vocab_size)
            drafted_at = clock.now()
            p_rows = warp(target_scorer.logits(context, tree, vocab_size), spec)
            step = verify_tree(tree, q_rows, p_rows, rule, generator)
            verified_at = clock.now()
            nodes_per_step.append(len(tree.tokens) - 1)
            record_step(result, depth, step.accepted, step_start, drafted_at, verified_at, start)
            result.beta.append(step.beta)
            result.accept_prob.append(step.accept_prob)
            emitted = torch.tensor(step.emitted)
            below, own = mass_before(torch.stack(step.laws), emitted)
            result.step_pit.extend(torch.stack([below, own], dim=1).tolist())
            untimed += clock.now() - verified_at
            reason = end_step(result, context, step.emitted, eos_ids, max_new_tokens)
            if reason is not None:
                break
    result.finish_reason = reason
    result.wall_s = clock.now() - start - untimed
    result.extra = {"tree": list(branching), "tree_children": children, "tree_nodes_per_step": nodes_per_step}
    return result
