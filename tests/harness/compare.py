"""How two runs are judged equal.

Greedy tokens must match exactly.  Logprobs are compared with a tolerance:
different layouts sum partial products in a different order (all-reduce
vs. local matmul), so float32 results differ in the last bits and bfloat16
results a little more.
"""

from __future__ import annotations

from .engine import Run

# The most a trusted bound may differ from its reference in bfloat16 before
# it is taken as broken rather than as a bound (nats, prompt and generated
# logprobs up to the first departure).  Upstream's TP=2 and TP=4 of the test
# hybrid lie near 0.4 from TP=1 on the pinned AVX2 path; a TP=2 whose ranks
# read each other's GDN decay parameters lay at 1.42.
TOLERANCE_CEILING = 1.0


def check_logprobs(r: Run, what: str = "") -> None:
    """Every prompt of ``r`` has a generated logprob for each of its tokens:
    a run that lost them (None, empty, short) must not compare as equal."""
    assert r.logprobs is not None and len(r.logprobs) == len(r.tokens), (
        f"{what}: generated logprobs for {len(r.logprobs or [])} of {len(r.tokens)} prompts")
    for i, (toks, lps) in enumerate(zip(r.tokens, r.logprobs)):
        assert lps is not None and len(lps) == len(toks) and None not in lps, (
            f"{what}: prompt {i}: {len(toks)} tokens, generated logprobs {lps}")


def logprob_diffs(xs: list[float | None], ys: list[float | None]) -> list[float]:
    """|x - y| of two runs' logprobs of one prompt, position by position, where both have
    one (a prompt's first token has none): the one pairing every judge here uses, and
    benchmarks/equivalence.py's GPU judge too."""
    return [abs(x - y) for x, y in zip(xs, ys) if x is not None and y is not None]


def max_logprob_diff(a: Run, b: Run) -> float:
    return max((d for la, lb in zip(a.logprobs + a.prompt_logprobs,
                                    b.logprobs + b.prompt_logprobs)
                for d in logprob_diffs(la, lb)), default=0.0)


def assert_same(ref: Run, got: Run, *, atol: float = 2e-3, what: str = "") -> None:
    assert len(ref.tokens) == len(got.tokens), what
    check_logprobs(ref, f"{what} (ref)")
    check_logprobs(got, f"{what} (got)")
    for i, (x, y) in enumerate(zip(ref.tokens, got.tokens)):
        assert x == y, f"{what}: prompt {i}: greedy tokens differ\n ref {x}\n got {y}"
    for i, (x, y) in enumerate(zip(ref.prompt_logprobs, got.prompt_logprobs)):
        assert len(x) == len(y), f"{what}: prompt {i}: {len(x)} vs {len(y)} prompt logprobs"
    diff = max_logprob_diff(ref, got)
    assert diff <= atol, f"{what}: max logprob difference {diff:.2e} > {atol:.0e}"


def agreeing(ref: Run, got: Run) -> tuple[list[int], float]:
    """Per prompt, how many greedy tokens ``got`` shares with ``ref`` before
    the first that differs; and the largest logprob difference over the
    prompt logprobs and over the generated tokens up to that point (after
    it the two continue different texts)."""
    lengths, worst = [], 0.0
    for x, y in zip(ref.prompt_logprobs, got.prompt_logprobs):
        worst = max([worst, *logprob_diffs(x, y)])
    for tx, ty, lx, ly in zip(ref.tokens, got.tokens, ref.logprobs, got.logprobs):
        k = 0
        while k < min(len(tx), len(ty)) and tx[k] == ty[k]:
            worst = max(worst, abs(lx[k] - ly[k]))
            k += 1
        lengths.append(k)
    return lengths, worst


def assert_no_further(ref: Run, bound: Run | float, got: Run, *, what: str = "",
                      ceiling: float = TOLERANCE_CEILING) -> None:
    """For bfloat16, where layouts that sum in another order differ in
    tokens, not just in the last bits: ``got`` is no further from ``ref``
    than ``bound`` is (``bound`` is a layout trusted to be right, e.g. TP=2
    for TP=1).  Up to where its greedy tokens first depart from ``ref``'s,
    its logprobs (prompt and generated) differ from ``ref``'s by no more
    than ``bound``'s most, ``tol``; and it may depart only at a near-tie
    that such a difference can flip: ``ref``'s lead of its token over
    ``got``'s, plus ``got``'s lead of its own over ``ref``'s, at most
    2 x ``tol``.  Where ``bound`` happens to keep ``ref``'s tokens, ``got``
    may still flip such a tie (another sum order rounds it the other way);
    a wrong distribution shows as a larger difference or a clear lead.
    ``bound`` may also be that largest difference itself, where no layout
    is trusted to be right (upstream's TP=2 judged against TP=1).  A bound
    further than ``ceiling`` from ``ref`` is no bound: the check fails."""
    check_logprobs(ref, f"{what} (ref)")
    check_logprobs(got, f"{what} (got)")
    if isinstance(bound, Run):
        assert len(ref.tokens) == len(bound.tokens), what
        check_logprobs(bound, f"{what} (bound)")
        _, tol = agreeing(ref, bound)
    else:
        tol = bound
    assert tol <= ceiling, (f"{what}: the bound is {tol:.3f} from the reference, past the "
                            f"ceiling {ceiling:.3f}: a broken bound, not a tolerance")
    assert len(ref.tokens) == len(got.tokens), what
    got_len, diff = agreeing(ref, got)
    assert diff <= tol, f"{what}: max logprob difference {diff:.3f} > the bound's {tol:.3f}"
    for i, k in enumerate(got_len):
        if k == min(len(ref.tokens[i]), len(got.tokens[i])):
            continue
        if isinstance(bound, Run) and got.tokens[i] == bound.tokens[i]:
            # ``bound``'s own departure, token for token: no further than it.  (The
            # trusted bound need not part from ``ref`` at a near-tie itself: upstream's
            # TP=1 and TP=2 of the hybrid with MTP part with TP=2's token outside TP=1's
            # top 3 on the AVX2 kernels.)
            continue
        a, b = ref.tokens[i][k], got.tokens[i][k]
        ref_top, got_top = ref.top[i][k], got.top[i][k]
        lead = (ref_top[a] - ref_top[b] if b in ref_top else float("inf")) + \
            (got_top[b] - got_top[a] if a in got_top else float("inf"))
        assert lead <= 2 * tol, (
            f"{what}: prompt {i}: tokens depart from the reference at {k}, not at a near-tie "
            f"(leads summed {lead:.3f} > 2 x the bound's {tol:.3f})\n ref {ref.tokens[i]} "
            f"top {ref_top}\n got {got.tokens[i]} top {got_top}")


def assert_between(a: Run, b: Run, got: Run, *, what: str = "") -> None:
    """For a bfloat16 layout that computes some of its products as
    upstream layout ``a`` does and the rest as ``b`` does (TP=2 x SP=2: the
    projections of TP=2, the Gated-DeltaNet heads with TP=4's per-rank
    shapes): no further from ``a`` than ``b`` is, and no further from ``b``
    than ``a`` is.  Equal to either passes; a layout that computes
    something else is far from both."""
    assert_no_further(a, b, got, what=f"{what} (from the first, bound the second)")
    assert_no_further(b, a, got, what=f"{what} (from the second, bound the first)")


def _hf_model(model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    return model.eval()


def _hf_generate(model, p: list[int], max_tokens: int) -> list[int]:
    import torch

    ids = torch.tensor([p])
    gen = model.generate(ids, attention_mask=torch.ones_like(ids),
                         max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                         do_sample=False, pad_token_id=0, eos_token_id=None)
    return gen[0, len(p):].tolist()


def hf_greedy(model_dir, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy tokens from Hugging Face transformers: an oracle that shares no
    code with vLLM."""
    import torch

    model = _hf_model(model_dir)
    with torch.no_grad():
        return [_hf_generate(model, p, max_tokens) for p in prompts]


def hf_run(model_dir, batches: list[list[list[int]]], max_tokens: int,
           prompt_logprobs: bool = True) -> Run:
    """``run_engine``'s result computed by transformers: greedy tokens, the
    logprob of each, and (first batch only, as ``run_engine`` asks) the
    prompt logprobs, all from one forward pass over prompt + output.  A TP=1
    vLLM engine started only to be compared with costs a minute of CI; this
    costs seconds."""
    import torch

    model = _hf_model(model_dir)
    tokens, logprobs, plps = [], [], []
    with torch.no_grad():
        for b, batch in enumerate(batches):
            for p in batch:
                out = _hf_generate(model, p, max_tokens)
                seq = p + out
                lp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), dim=-1)
                tokens.append(out)
                logprobs.append([lp[len(p) - 1 + j, t].item() for j, t in enumerate(out)])
                plps.append([None] + [lp[j - 1, p[j]].item() for j in range(1, len(p))]
                            if prompt_logprobs and b == 0 else [])
    return Run(tokens, logprobs, plps)
