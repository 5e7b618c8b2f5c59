"""What is served where: the installs a layout's server imports, the layouts (world = DP x
SP x TP) and what each is compared with, and the result sets ($BENCH_DIR/res/<shape>[-<tag>])."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(os.environ.get("BENCH_DIR", "/root/bench"))
RES = BENCH / "res"
# install -> PYTHONPATH.  "arctic": ArcticInference 0.3.0 as a plugin of the official wheel
# (benchmarks/arctic-setup.sh), enabled per server by ARCTIC_INFERENCE_ENABLED=1.  The paths
# and their defaults are benchmarks/hostpaths.sh's, which host-setup.sh installs into.
_OFFICIAL = os.environ.get("SITE_OFFICIAL", "/tmp/site")
SITES = {"official": _OFFICIAL, "ours": os.environ.get("SITE_OURS", "/tmp/site-ours"),
         "before": os.environ.get("SITE_BEFORE", "/tmp/site-before"),   # stage.py --before
         "arctic": os.environ.get("SITE_ARCTIC", "/tmp/site-arctic") + ":" + _OFFICIAL}


# name -> (install, GPUs, serve arguments).  World = DP x SP x TP.
LAYOUTS = {
    "tp1": ("official", 1, ["-tp", "1"]),
    "tp1_ours": ("ours", 1, ["-tp", "1"]),          # SP=1 must be upstream: no regression
    # the two served again, one server each: a 1% bound needs the drift between servers
    **{f"{name}_s{i}": (install, 1, ["-tp", "1"])
       for i in (1, 2) for name, install in (("tp1", "official"), ("tp1_ours", "ours"))},
    "tp2": ("official", 2, ["-tp", "2"]),
    "dp2": ("official", 2, ["-dp", "2"]),
    "sp2": ("ours", 2, ["-sp", "2"]),
    "sp2_before": ("before", 2, ["-sp", "2"]),     # ours before a speed change (stage.py --before)
    "shift": ("ours", 2, ["-sp", "2", "--shift-parallel"]),
    "shift_before": ("before", 2, ["-sp", "2", "--shift-parallel"]),
    "tp2_again": ("official", 2, ["-tp", "2"]),    # served twice: the spread between servers
    "tp4": ("official", 4, ["-tp", "4"]),
    "dp2_tp2": ("official", 4, ["-dp", "2", "-tp", "2"]),
    "tp2_sp2": ("ours", 4, ["-tp", "2", "-sp", "2"]),
    "shift_tp2_sp2": ("ours", 4, ["-tp", "2", "-sp", "2", "--shift-parallel"]),
    # SP=4 and its Shift (<-> TP=4): each GPU holds the whole model (70B FP8: ~68 GiB), so
    # with shift's full-TP copy beside it only an H200 has room for a KV cache
    "sp4": ("ours", 4, ["-sp", "4"]),
    "shift_sp4": ("ours", 4, ["-sp", "4", "--shift-parallel"]),
    # The peer, each at its own defaults (its shift threshold: 512).
    "arctic_sp2": ("arctic", 2, ["--ulysses-sequence-parallel-size", "2"]),
    "arctic_shift": ("arctic", 2, ["--ulysses-sequence-parallel-size", "2",
                                   "--enable-shift-parallel"]),
    "arctic_tp2_sp2": ("arctic", 4, ["-tp", "2", "--ulysses-sequence-parallel-size", "2"]),
    "arctic_shift_tp2_sp2": ("arctic", 4, ["-tp", "2", "--ulysses-sequence-parallel-size", "2",
                                           "--enable-shift-parallel"]),
    "arctic_sp4": ("arctic", 4, ["--ulysses-sequence-parallel-size", "4"]),
    "arctic_shift_sp4": ("arctic", 4, ["--ulysses-sequence-parallel-size", "4",
                                       "--enable-shift-parallel"]),
}
# The 8-GPU matrix at the seeds' setting (Llama-3.1-70B, FP8): 64 query and 8 KV heads, so
# SP=8 gives each rank 8 query heads and one KV head; shift serves TP=2 x SP=4 and switches to
# TP=8 (the same GPUs) on small batches.
LAYOUTS.update({
    "tp8": ("official", 8, ["-tp", "8"]),
    "dp4_tp2": ("official", 8, ["-dp", "4", "-tp", "2"]),
    "tp2_sp4": ("ours", 8, ["-tp", "2", "-sp", "4"]),
    "sp8": ("ours", 8, ["-sp", "8"]),
    "shift_tp2_sp4": ("ours", 8, ["-tp", "2", "-sp", "4", "--shift-parallel"]),
    "arctic_tp2_sp4": ("arctic", 8, ["-tp", "2", "--ulysses-sequence-parallel-size", "4"]),
    "arctic_shift_tp2_sp4": ("arctic", 8, ["-tp", "2", "--ulysses-sequence-parallel-size", "4",
                                           "--enable-shift-parallel"]),
})
# FP8 rows: weights quantized online from the dummy bf16 ones (`_fp8`), and the KV cache in
# FP8 as well (`_fp8kv`).  tp1_fp8* are the one-H200 dry run of the 70B FP8 shape; the 4-GPU
# ones are plans/four-gpu.sh's matrix (issue 34).
for _n in ("tp1", "tp8", "dp4_tp2", "tp2_sp4", "sp8", "shift_tp2_sp4", "arctic_tp2_sp4",
           "arctic_shift_tp2_sp4",
           "tp4", "dp2_tp2", "tp2_sp2", "shift_tp2_sp2", "sp4", "shift_sp4", "arctic_tp2_sp2",
           "arctic_shift_tp2_sp2", "arctic_sp4", "arctic_shift_sp4"):
    _install, _gpus, _args = LAYOUTS[_n]
    LAYOUTS[f"{_n}_fp8"] = (_install, _gpus, [*_args, "--quantization", "fp8"])
    LAYOUTS[f"{_n}_fp8kv"] = (_install, _gpus, [*_args, "--quantization", "fp8",
                                                 "--kv-cache-dtype", "fp8"])
LAYOUTS["shift_tp2_sp2_fp8_before"] = ("before", *LAYOUTS["shift_tp2_sp2_fp8"][1:])
LAYOUTS["tp4_fp8_again"] = LAYOUTS["tp4_fp8"]
# Expert parallelism (the MoE shape `a3b`): a MoE layer's experts over all the GPUs of a
# replica (ours: over TP x SP), against upstream's TP=2 and DP=2 with EP.
LAYOUTS.update({
    "tp2_ep": ("official", 2, ["-tp", "2", "--enable-expert-parallel"]),
    "dp2_ep": ("official", 2, ["-dp", "2", "--enable-expert-parallel"]),
    "sp2_ep": ("ours", 2, ["-sp", "2", "--enable-expert-parallel"]),
    "shift_ep": ("ours", 2, ["-sp", "2", "--shift-parallel", "--enable-expert-parallel"]),
})
# our layout -> the peer's same layout (the ratio the issue asks for: at least as good)
PEER = {"sp2": "arctic_sp2", "shift": "arctic_shift",
        **{f"{a}{q}": f"{b}{q}" for q in ("", "_fp8", "_fp8kv")
           for a, b in (("tp2_sp2", "arctic_tp2_sp2"), ("shift_tp2_sp2", "arctic_shift_tp2_sp2"),
                        ("tp2_sp4", "arctic_tp2_sp4"), ("sp4", "arctic_sp4"),
                        ("shift_sp4", "arctic_shift_sp4"),
                        ("shift_tp2_sp4", "arctic_shift_tp2_sp4"))}}
# Upstream references of a layout by its GPU count (the paper's TP=8 and DP rows, scaled), and
# shift's own layout without shift (which it must not lose to on long prompts).
UPSTREAM = {1: ("tp1", ""), 2: ("tp2", "dp2"), 4: ("tp4", "dp2_tp2"), 8: ("tp8", "dp4_tp2")}
NO_SHIFT = {"shift": "sp2", "shift_tp2_sp2": "tp2_sp2", "shift_sp4": "sp4",
            "shift_tp2_sp4": "tp2_sp4", "shift_ep": "sp2_ep"}


MAX_MODEL_LEN = {False: 34000, True: 4096}          # GPU shapes, the tiny dry run
MAX_LEN_ARG: list[int] = []                         # run.py --max-model-len, when given
TAG: list[str] = []                                 # run.py --tag, when given
# run.py --dry-run (or BENCH_DRY_RUN=1, how `session.sh dry` asks every run.py of a plan): print
# the servers and clients a `layout` would start, start nothing
DRY: list[bool] = [os.environ.get("BENCH_DRY_RUN") == "1"]


def max_model_len(shape: str) -> int:
    return MAX_LEN_ARG[0] if MAX_LEN_ARG else MAX_MODEL_LEN[shape == "tiny"]


def set_dir(shape: str) -> Path:
    """A result set: $BENCH_DIR/res/<shape>, or <shape>-<tag> with --tag.  A plan serves a
    layout again under a tag to compare it with another layout on the same lease."""
    return RES / (f"{shape}-{TAG[0]}" if TAG else shape)
