"""The real vLLM CPU engine from our wheel: TP=2 gives TP=1's greedy tokens."""

from __future__ import annotations

import pytest
from harness.compare import assert_same
from harness.engine import run_engine
from harness.models import make_model

pytestmark = pytest.mark.e2e

PROMPTS = [[1, 5, 9, 33, 77, 12, 5], list(range(3, 60)), [7] * 3]


@pytest.fixture(scope="module")
def llama(models_dir):
    return make_model(models_dir, "llama", heads=8, kv_heads=2)


def test_tp2_matches_tp1(llama):
    ref = run_engine(llama, PROMPTS, tp=1, max_tokens=12)
    got = run_engine(llama, PROMPTS, tp=2, max_tokens=12)
    assert all(len(t) == 12 for t in ref.tokens)
    assert_same(ref, got, what="TP=2 vs TP=1")
