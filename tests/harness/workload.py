"""The offline workload every end-to-end equivalence test runs (SP, Shift,
PP, Ray), so that each layout is judged on the same steps.

Prompts: odd lengths (steps padded to a multiple of SP), one longer than a
chunk (chunked prefill with a 64-token budget), and later batches that share
prefixes with the first (prefix caching on; ``check_prefix_cache`` checks the
hits).
"""

from __future__ import annotations

import random

from .engine import Run, run_engine
from .repo import VERSION

rng = random.Random(7)
LONG = [rng.randrange(3, 500) for _ in range(150)]
PROMPTS = [[rng.randrange(3, 500) for _ in range(7)], [rng.randrange(3, 500) for _ in range(33)],
           LONG, [5]]
THEN = [LONG[:96] + [11, 12, 13, 14, 15, 16, 17, 18, 19],
        LONG[:64] + [rng.randrange(3, 500) for _ in range(21)]]
# [LONG] again without prompt logprobs fills the cache that THEN reads.
BATCHES = [PROMPTS, [LONG], THEN]
# The smallest block each release's CPU attention takes: vLLM 0.32's needs a
# multiple of 32, 0.26's sliding-window kernel (Mistral) fails on 32.
# THEN's shared prefixes (96 and 64 tokens) are whole blocks either way.
BLOCK = 16 if VERSION == "0.26.0" else 32
ENGINE = dict(max_num_batched_tokens=64, block_size=BLOCK, max_tokens=10)
# The same steps but the last decodes, for the Ray executors' engines: their
# steps cost several times the multiprocessing executor's on the 2-core CPU
# machine (upstream's, at plain TP too), and a decode step is a decode step.
SHORT = dict(max_tokens=4)


def run(model, tp=1, sp=1, batches=BATCHES, **kw) -> Run:
    """The workload (or ``batches`` that extend it) on one vLLM layout."""
    return run_engine(model, batches[0], then=batches[1:], tp=tp, sp=sp, **{**ENGINE, **kw})


def check_prefix_cache(r: Run) -> None:
    assert all(c >= 64 for c in r.cached_tokens[-len(THEN):]), r.cached_tokens


def check_shift(r: Run, world: int = 4) -> None:
    """A Shift run: both modes served steps, every rank took the same path,
    and the full-TP model's attention layers hold the SP model's KV-cache
    tensors."""
    assert len(r.shift) == world, r.shift
    for rank in r.shift:
        assert rank["layers"] >= 2 and rank["same_tensors"], rank
        assert rank["served"]["sp"] >= 4 and rank["served"]["full_tp"] >= 10, rank
    assert len({tuple(sorted(rank["served"].items())) for rank in r.shift}) == 1, r.shift


def reference(model, max_tokens: int = ENGINE["max_tokens"]) -> Run:
    """The workload in Hugging Face transformers, laid out as ``run``'s
    result: the reference of a family whose TP=1 vLLM engine would only
    repeat it (test_e2e_sp's test_tp1_matches_transformers shows TP=1
    equals transformers).  ``max_tokens``: as ``run``'s (``SHORT``)."""
    from .compare import hf_run

    return hf_run(model, BATCHES, max_tokens)


def checkpoint_experts(model) -> dict[int, tuple[int, int]]:
    """Per MoE layer of a checkpoint: (routed experts, bytes of their
    parameters as stored), shared experts and the router left out
    (GraniteMoe stores a layer's experts stacked in ``block_sparse_moe``'s
    ``input_linear`` and ``output_linear``)."""
    import json
    import re
    from pathlib import Path

    from safetensors import safe_open

    cfg = json.loads((Path(model) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    experts = next(cfg[k] for k in ("num_experts", "n_routed_experts", "num_local_experts")
                   if cfg.get(k))
    layers: dict[int, int] = {}
    for f in Path(model).glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            for name in st.keys():
                m = re.search(r"layers\.(\d+)\.(.*\.experts\.|block_sparse_moe\.\w+_linear\.)",
                              name)
                if m:
                    t = st.get_tensor(name)
                    layers[int(m[1])] = layers.get(int(m[1]), 0) + t.numel() * t.element_size()
    return {i: (experts, n) for i, n in layers.items()}


def check_expert_placement(model, r: Run, ranks: int) -> None:
    """Every MoE layer holds experts / ranks experts on each GPU, each expert
    on exactly one GPU, in 1/ranks of the checkpoint's routed-expert bytes
    counted once over the SP model and Shift's full-TP model (when it runs),
    which holds the very tensors of the SP model's ("together" 1.0; a copy
    would make it 2.0).  Replicated over the SP ranks, as without
    ulysses_moe's placement, a GPU would hold experts / TP in 1/TP of the
    bytes."""
    import re

    want = checkpoint_experts(model)
    assert len(r.experts) == ranks and want, (r.experts, want)
    by_layer: dict[str, list[int]] = {}
    for rank in r.experts:
        assert len(rank["layers"]) == len(want), (rank, want)
        for layer in rank["layers"]:
            experts, size = want[int(re.search(r"layers\.(\d+)\.", layer["layer"])[1])]
            assert layer["of"] == experts and len(layer["held"]) == experts // ranks, layer
            assert layer["together"] == 1.0 and layer["bytes"] == size // ranks, (layer, size)
            by_layer.setdefault(layer["layer"], []).extend(layer["held"])
    for name, held in by_layer.items():
        assert sorted(held) == list(range(experts)), (name, held)
