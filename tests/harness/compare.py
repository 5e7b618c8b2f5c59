"""How two runs are judged equal.

Greedy tokens must match exactly.  Logprobs are compared with a tolerance:
different layouts sum partial products in a different order (all-reduce
vs. local matmul), so float32 results differ in the last bits and bfloat16
results a little more.
"""

from __future__ import annotations

from .engine import Run


def max_logprob_diff(a: Run, b: Run) -> float:
    worst = 0.0
    for la, lb in zip(a.logprobs + a.prompt_logprobs, b.logprobs + b.prompt_logprobs):
        for x, y in zip(la, lb):
            if x is not None and y is not None:
                worst = max(worst, abs(x - y))
    return worst


def assert_same(ref: Run, got: Run, *, atol: float = 2e-3, what: str = "") -> None:
    assert len(ref.tokens) == len(got.tokens), what
    for i, (x, y) in enumerate(zip(ref.tokens, got.tokens)):
        assert x == y, f"{what}: prompt {i}: greedy tokens differ\n ref {x}\n got {y}"
    for i, (x, y) in enumerate(zip(ref.prompt_logprobs, got.prompt_logprobs)):
        assert len(x) == len(y), f"{what}: prompt {i}: {len(x)} vs {len(y)} prompt logprobs"
    diff = max_logprob_diff(ref, got)
    assert diff <= atol, f"{what}: max logprob difference {diff:.2e} > {atol:.0e}"


def same_tokens(a: Run, b: Run) -> list[int]:
    """The prompts whose greedy tokens agree between two runs."""
    return [i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x == y]


def assert_within(ref: Run, got: Run, tol: float, *, prompts: list[int] | None = None,
                  what: str = "") -> float:
    """``assert_same`` for bfloat16 layouts whose own control diverges: the
    greedy tokens (and their logprobs) of ``prompts`` only -- those where
    the control layout (e.g. TP=2) keeps the reference's tokens, since after
    a near-tie flips the continuations are no longer comparable -- and the
    prompt logprobs of every prompt (teacher-forced, so always comparable),
    all within ``tol``.  Returns the largest difference seen."""
    prompts = list(range(len(ref.tokens))) if prompts is None else prompts
    assert len(ref.tokens) == len(got.tokens), what
    assert prompts, f"{what}: no prompt to compare greedy tokens on"
    worst = 0.0
    for i in prompts:
        assert ref.tokens[i] == got.tokens[i], \
            f"{what}: prompt {i}: greedy tokens differ\n ref {ref.tokens[i]}\n got {got.tokens[i]}"
        worst = max([worst] + [abs(x - y) for x, y in zip(ref.logprobs[i], got.logprobs[i])])
    for i, (x, y) in enumerate(zip(ref.prompt_logprobs, got.prompt_logprobs)):
        assert len(x) == len(y), f"{what}: prompt {i}: {len(x)} vs {len(y)} prompt logprobs"
        worst = max([worst] + [abs(u - v) for u, v in zip(x, y) if u is not None])
    assert worst <= tol, f"{what}: max logprob difference {worst:.3e} > {tol:.3e}"
    return worst


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
