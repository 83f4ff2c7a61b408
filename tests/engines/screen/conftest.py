"""Shared by the screen's tests."""

from __future__ import annotations

import pytest
import torch


class CallDependentDraft(torch.nn.Module):
    """A draft whose logits depend on how many tokens the call holds (as a per-call activation scale does)."""

    def __init__(self, draft):
        super().__init__()
        self.draft, self.config = draft, draft.config
        self._specaudit_cache_keyword = getattr(draft, "_specaudit_cache_keyword", None) or "past_key_values"

    def forward(self, input_ids, **kwargs):
        output = self.draft(input_ids=input_ids, **kwargs)
        output.logits = output.logits * (1.0 + 0.5 * (input_ids.shape[-1] > 1))
        return output


@pytest.fixture
def call_dependent():
    return CallDependentDraft
