"""The emitted token ids and per-step counts of one `llama-speculative` run, read from its debug
log (stderr at `-lv 5`), checked against what the program prints itself.

The example prints no token ids on stdout, only the text; its debug lines name every emitted id
(examples/speculative/speculative.cpp of the vendored llama.cpp):

- `draft S: [ 'piece':ID, ... ]`, at the top of a step: the draft sequences (tree branches) the
  target is about to verify, one line per active branch;
- `draft token I of sequence S (ID, 'piece') accepted` (temperature > 0) or `the sampled target
  token matches the Ith drafted token of sequence S (ID, 'piece') - accepted` (greedy; once per
  branch that holds the token): the draft token at depth I kept;
- `the sampled target token (ID, 'piece') did not match, or we ran out of drafted tokens`: the
  target's own token that ends the step (a rejection's residual sample or the token past the
  last draft);
- `splitting seq A into B`: a new branch opened while drafting the next step;
- `n_predict = N`, `n_accept = N` (info lines at the end): the program's totals.

A step emits its accepted draft tokens then the target's token. `parse` checks what it reads:
every accepted token is the token its branch holds at that depth, the depths run 0, 1, ... in a
step, each step ends with the target's token, and the totals equal the program's `n_predict` and
`n_accept`; `emitted_text` is then compared with the text on stdout by the executor. A log that
breaks any of these raises LogError (the record is an engine fault, never dropped silently).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Each log line may start with llama.cpp's prefix (timestamp and level letter, "0.05.212.675 D ").
_PREFIX = r"^(?:[0-9.]+ [A-Z] )?"
# A branch's list ends at " ]" closing its line where the next log line begins: a piece may itself
# hold "]" and newlines (Qwen's token "]\n\n").
_BRANCH = re.compile(_PREFIX + r"draft (\d+): \[ ?(.*?) ?\](?=\n[0-9.]+ [A-Z] |\n*\Z)", re.M | re.S)
_BRANCH_PLAIN = re.compile(r"^draft (\d+): \[ ?(.*?) ?\]$", re.M | re.S)  # a log without llama.cpp's prefix
_BRANCH_ID = re.compile(r"':(\d+)(?=, '|$)", re.S)
_ACCEPTED = re.compile(r"draft token (\d+) of sequence (\d+) \((\d+), '.*?'\) (accepted|rejected)$", re.M | re.S)
_GREEDY = re.compile(
    r"the sampled target token matches the (\d+)th drafted token of sequence (\d+) \((\d+), '.*?'\) - accepted$", re.M | re.S
)
_END = re.compile(r"the sampled target token \((\d+), '.*?'\) did not match, or we ran out of drafted tokens$", re.M | re.S)
_SPLIT = re.compile(r"splitting seq +(\d+) into +(\d+)")
_TOTAL = re.compile(_PREFIX + r"(n_predict|n_accept|n_drafted|n_draft) *= (-?\d+)$", re.M)
_EVENTS = (("branch", _BRANCH), ("stochastic", _ACCEPTED), ("greedy", _GREEDY), ("end", _END), ("split", _SPLIT))


class LogError(ValueError):
    """The log does not hold a consistent account of the run (one clause)."""


@dataclass
class Step:
    """One draft-and-verify step: the branches verified, the draft tokens kept, the target's token."""

    branches: dict[int, list[int]] = field(default_factory=dict)  # sequence -> its drafted ids
    accepted: list[int] = field(default_factory=list)
    final: int | None = None
    rejected: int = 0  # draft tokens the stochastic check rejected (one per branch tried)
    splits: int = 0  # branches opened while drafting the *next* step

    @property
    def tokens(self) -> list[int]:
        return [*self.accepted, self.final] if self.final is not None else list(self.accepted)

    @property
    def depth(self) -> int:
        """Draft tokens proposed along the deepest branch (0 when nothing was drafted)."""
        return max((len(b) for b in self.branches.values()), default=0)

    @property
    def nodes(self) -> int:
        """Distinct draft tokens in the tree (branches share their common prefixes)."""
        return len({tuple(b[: i + 1]) for b in self.branches.values() for i in range(len(b))})


@dataclass
class SpeculativeLog:
    steps: list[Step]
    totals: dict[str, int]

    @property
    def tokens(self) -> list[int]:
        return [token for step in self.steps for token in step.tokens]


def _events(text: str) -> list[tuple[int, str, re.Match]]:
    prefixed = re.search(r"^[0-9.]+ [A-Z] ", text, re.M) is not None
    patterns = [(kind, _BRANCH_PLAIN if kind == "branch" and not prefixed else pattern) for kind, pattern in _EVENTS]
    found = [(m.start(), kind, m) for kind, pattern in patterns for m in pattern.finditer(text)]
    return sorted(found, key=lambda event: event[0])


def parse(stderr: str) -> SpeculativeLog:
    """The steps of one run's debug log, checked (module docstring); LogError where it is inconsistent."""
    steps: list[Step] = []
    step = Step()
    for _, kind, match in _events(stderr):
        if kind == "branch":
            if step.accepted or step.rejected:
                raise LogError(f"a draft branch is listed after step {len(steps)} began its verification")
            step.branches[int(match.group(1))] = [int(t) for t in _BRANCH_ID.findall(match.group(2))]
        elif kind in ("stochastic", "greedy"):
            depth, sequence, token = int(match.group(1)), int(match.group(2)), int(match.group(3))
            if kind == "stochastic" and match.group(4) == "rejected":
                step.rejected += 1
                continue
            if kind == "greedy" and depth == len(step.accepted) - 1 and step.accepted[-1] == token:
                continue  # the same kept token, matched by another branch that holds it
            branch = step.branches.get(sequence)
            if depth != len(step.accepted):
                raise LogError(f"step {len(steps)} kept a draft token at depth {depth} after {len(step.accepted)} kept ones")
            if branch is None or depth >= len(branch) or branch[depth] != token:
                raise LogError(f"step {len(steps)} kept token {token} at depth {depth} of sequence {sequence}, which drafted {branch}")
            step.accepted.append(token)
        elif kind == "end":
            step.final = int(match.group(1))
            steps.append(step)
            step = Step()
        elif kind == "split" and steps:
            steps[-1].splits += 1
    if step.accepted or step.branches:
        raise LogError(f"the log ends inside step {len(steps)} (no target token closes it): the program stopped early")
    totals = {name: int(value) for name, value in _TOTAL.findall(stderr)}
    log = SpeculativeLog(steps, totals)
    if "n_predict" not in totals or "n_accept" not in totals:
        raise LogError("the log has no n_predict / n_accept totals: the program did not finish")
    if totals["n_predict"] != len(log.tokens):
        raise LogError(f"the debug lines name {len(log.tokens)} emitted tokens, the program counted n_predict = {totals['n_predict']}")
    kept = sum(len(s.accepted) for s in steps)
    if totals["n_accept"] != kept:
        raise LogError(f"the debug lines name {kept} kept draft tokens, the program counted n_accept = {totals['n_accept']}")
    return log


def generated_output(stdout: bytes, prompt_text: bytes) -> bytes:
    """The generated part of the program's stdout: it prints two newlines, the prompt's pieces,
    the generated pieces, then blank lines at the end."""
    head = b"\n\n" + prompt_text
    if not stdout.startswith(head):
        raise LogError("the program's stdout does not start with the prompt as specaudit tokenised it")
    return stdout[len(head) :].removesuffix(b"\n\n\n\n")


__all__ = ["LogError", "SpeculativeLog", "Step", "generated_output", "parse"]
