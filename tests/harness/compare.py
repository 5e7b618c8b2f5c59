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


def hf_greedy(model_dir, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy tokens from Hugging Face transformers: an oracle that shares no
    code with vLLM."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
            out.append(gen[0, len(p):].tolist())
    return out
