"""The comparison judge itself (harness.compare), on hand-made runs: no
engine.  Each check passes on a faithful run and fails on a planted defect:
generated logprobs lost (None, empty, short), and a bound too far from its
reference to bound anything."""

from __future__ import annotations

import pytest

from harness.compare import TOLERANCE_CEILING, agreeing, assert_no_further, assert_same
from harness.engine import Run

pytestmark = pytest.mark.once


def run(tokens=((5, 6, 7), (8, 9)), shift: float = 0.0, top=None) -> Run:
    """Greedy ``tokens`` with logprobs -0.5, -1.0, ... moved by ``shift``."""
    tokens = [list(t) for t in tokens]
    logprobs = [[-0.5 * (k + 1) + shift for k in range(len(t))] for t in tokens]
    prompt_logprobs = [[None, -2.0 + shift, -3.0 + shift] for _ in tokens]
    return Run(tokens, logprobs, prompt_logprobs, top=top or [])


def test_assert_same_passes_on_equal_runs():
    assert_same(run(), run(shift=1e-4))


@pytest.mark.parametrize("defect", ["none", "empty", "short", "a None"])
def test_assert_same_fails_without_generated_logprobs(defect):
    got = run()
    if defect == "none":
        got.logprobs = None
    elif defect == "empty":
        got.logprobs = []
    elif defect == "short":
        got.logprobs[1] = got.logprobs[1][:1]
    else:
        got.logprobs[0][1] = None
    with pytest.raises(AssertionError, match="generated logprobs"):
        assert_same(run(), got)
    with pytest.raises(AssertionError, match="generated logprobs"):
        assert_same(got, run())


def test_assert_no_further_passes_within_a_bound():
    ref = run()
    assert_no_further(ref, run(shift=0.1), run(shift=0.05))
    assert agreeing(ref, run(shift=0.05))[0] == [3, 2]


def test_assert_no_further_fails_past_its_bound():
    with pytest.raises(AssertionError, match="the bound's"):
        assert_no_further(run(), run(shift=0.1), run(shift=0.3))


def test_assert_no_further_fails_on_a_broken_bound():
    """A bound as far from the reference as a broken layout would let any
    run pass; past the ceiling it fails the check, as a float bound does."""
    broken = run(shift=TOLERANCE_CEILING + 0.5)
    with pytest.raises(AssertionError, match="broken bound"):
        assert_no_further(run(), broken, run(shift=TOLERANCE_CEILING))
    with pytest.raises(AssertionError, match="broken bound"):
        assert_no_further(run(), TOLERANCE_CEILING + 0.5, run())


def test_assert_no_further_fails_without_generated_logprobs():
    got = run()
    got.logprobs = []
    with pytest.raises(AssertionError, match="generated logprobs"):
        assert_no_further(run(), run(shift=0.1), got)
