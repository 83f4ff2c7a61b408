"""Fixtures of the prompt-set tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from prompt_factory import make_set


@pytest.fixture
def small_set(tmp_path: Path) -> Path:
    return make_set(tmp_path / "small")
