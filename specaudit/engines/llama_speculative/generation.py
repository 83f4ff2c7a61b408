"""A `llama-speculative` run's log as a specaudit Generation: the emitted ids cut to the record's
budget, and per step what was proposed (the deepest branch), kept, and how wide the tree was.

The program overshoots the budget: it checks `-n` only between steps, so its last step may emit
up to k + 1 tokens past it, and it keeps accepting draft tokens after an end-of-generation token
within that step. The record keeps the first `max_new_tokens` ids, cut after the first
end-of-sequence id, as every engine's records are; a step that the cut ends early keeps the draft
tokens it accepted before the cut (the counters invariant's allowance for a budget ended inside
the accepted drafts) and steps past it are dropped. `extra.emitted_past_cut` says how many ids
were cut, `extra.program_totals` holds the program's own totals before the cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.decoding import Generation

if TYPE_CHECKING:
    from specaudit.engines.llama_speculative.log import SpeculativeLog
    from specaudit.engines.llama_speculative.process import Finished


def generation_of(log: SpeculativeLog, finished: Finished, eos_ids: set[int], max_new_tokens: int) -> Generation:
    tokens: list[int] = []
    proposed: list[int] = []
    accepted: list[int] = []
    branches: list[int] = []
    nodes: list[int] = []
    finish = "length"
    for step in log.steps:
        room = max_new_tokens - len(tokens)
        if room <= 0 or (tokens and tokens[-1] in eos_ids):
            break
        kept = step.tokens[:room]
        for index, token in enumerate(kept):
            if token in eos_ids:
                kept = kept[: index + 1]
                break
        tokens += kept
        proposed.append(step.depth)
        accepted.append(min(len(step.accepted), len(kept)))
        branches.append(len(step.branches))
        nodes.append(step.nodes)
    if tokens and tokens[-1] in eos_ids:
        finish = "eos"
    elif len(tokens) < max_new_tokens:
        finish = "eos"  # the program stopped on an end-of-generation id specaudit does not list (checked by the invariants)
    encode = finished.encode_s or 0.0
    decode = finished.decode_s if finished.decode_s is not None else finished.process_s
    return Generation(
        tokens=tokens,
        finish_reason=finish,
        wall_s=encode + decode,
        ttft_s=encode,
        steps=len(proposed),
        proposed=sum(proposed),
        accepted=sum(accepted),
        proposed_per_step=proposed,
        accepted_per_step=accepted,
        draft_s=0.0,
        verify_s=encode + decode,
        extra={
            "tree_branches_per_step": branches,
            "tree_nodes_per_step": nodes,
            "emitted_past_cut": len(log.tokens) - len(tokens),
            "program_totals": dict(log.totals),  # its own n_predict, n_drafted, n_accept, before the cut
            "process_s": round(finished.process_s, 4),
        },
    )


__all__ = ["generation_of"]
