"""Run a real vLLM engine in a fresh subprocess and collect its outputs.

Why a subprocess: an engine with several ranks starts worker processes and
process groups that are not fully torn down in-process, and each layout must
start from a clean interpreter exactly as a user's would.  The child prints
one JSON document on a line of its own, behind a marker.

CPU specifics (the CI machine): vLLM's CPU worker binds its OpenMP threads
to cores by rank.  With more ranks than cores, ranks share cores round-robin.
Each rank's KV cache is ``KV_CACHE_BYTES`` (64 MiB: 64k tokens of the tiny
models, hundreds of times what a test holds): allocating and zeroing the
1 GiB that VLLM_CPU_KVCACHE_SPACE=1 (its smallest) asks for took ~3 s of
each engine's start on the 2-core CI machine, and 1 GiB per rank of its
memory.

Where the child comes from (``FORK``): most runs fork it from one process
that has imported vLLM once per session (``Forker``), instead of starting
an interpreter that imports it again: ``from vllm import LLM`` is ~9 s of
CPU, most of a TP=1 run and a fifth of a TP=2 x SP=2 run on the 2-core CI
machine.  The fork has done nothing but the imports (no engine, no thread
pool: the imports run no parallel op), and the child takes the run's
environment before vLLM reads any of it, so it starts as the fresh
interpreter would after its imports.  Its workers are forked from it in
turn (``_fork_workers``) where vLLM's CPU platform would spawn them: a spawned
worker imported vLLM again, ~5 s of CPU a rank, most of a TP=2 run's start
(docs/testing.md has the figures).  Forked workers are what ``LLM(...)`` gives a
GPU user (vLLM forks them unless CUDA is already initialised); spawned
ones, what the CPU platform gives and what ``vllm serve`` gives on every
platform (its CLI asks for spawn), run in every ``vllm serve`` test
(harness.server), in every run that takes a fresh interpreter, and in
all runs with ``SP_TEST_FORK=0``.  A run whose environment differs
from the forker's in anything read at import time (Ray's, Inductor on)
gets a fresh interpreter as before; folders a run adds to ``PYTHONPATH``
(the suffix drafter's package) the child puts on ``sys.path`` itself.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT = "@@engine-result@@ "
KV_CACHE_BYTES = 64 << 20
# The most likely ids and their logprobs at each generated token: where a
# bfloat16 run departs from its reference, they tell a near-tie from a
# wrong distribution (harness.compare.assert_no_further).  Ten, not three: on
# these random models' flat distributions a departure's other token can sit
# just below a run's top three (upstream's TP=2 of the hybrid did), which three
# scored as no near-tie at all.
TOP_LOGPROBS = 10
# The engine core runs inside the child that calls ``generate`` (vLLM's
# default gives it a process of its own).  Two reasons:
# * every prompt is scheduled before the first step.  In a process of its
#   own the core starts stepping when the first request reaches it, so which
#   prompts share a step depends on timing; in bfloat16 another batch rounds
#   otherwise, and a step-by-step mode count would vary.
# * start-up: one interpreter fewer to import vLLM into, and at TP=1 no
#   worker process either (the model runs in the child, as in vLLM's
#   UniProcExecutor).
# The workers, the model runner and the scheduler are the same code either
# way; ``vllm serve`` (harness.server) always runs the core in its own
# process, so the server tests cover that path.  A caller may pass
# {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"} in ``env`` to get it here.
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@dataclass
class Run:
    tokens: list[list[int]]                      # generated ids, per prompt
    logprobs: list[list[float]]                  # logprob of each generated id
    prompt_logprobs: list[list[float | None]]    # logprob of each prompt id
    cached_tokens: list[int] = field(default_factory=list)  # prefix-cache hits, per prompt
    prompt_ids: list[list[int]] = field(default_factory=list)  # as the engine tokenized them
    spec: dict = field(default_factory=dict)     # speculative decoding counters
    seconds: float = 0.0
    shift: list[dict] = field(default_factory=list)   # per rank, with shift_parallel
    top: list[list[dict[int, float]]] = field(default_factory=list)  # TOP_LOGPROBS per token
    gathers: list[dict] = field(default_factory=list)  # per rank, with SP: see _gather_report
    experts: list[dict] = field(default_factory=list)  # per rank, with EP or SP: _experts_report
    log: str = field(default="", repr=False)


def cpu_env(world: int) -> dict[str, str]:
    """One core a rank (rank r on core r % cores), one OpenMP thread each.
    vLLM binds a spawned worker by the environment it starts with
    (``OMP_NUM_THREADS``, ``OMP_PLACES``), which an OpenMP runtime reads
    once, as it loads; a worker forked from the forker keeps the runtime the
    forker loaded, so without ``OMP_NUM_THREADS`` here each forked rank ran
    as many threads as the host has cores (docs/testing.md)."""
    cores = os.cpu_count() or 1
    return {
        "VLLM_CPU_OMP_THREADS_BIND": "|".join(str(r % cores) for r in range(world)),
        "OMP_NUM_THREADS": "1",
        "TORCHDYNAMO_DISABLE": os.environ.get("TORCHDYNAMO_DISABLE", "1"),
    }


# Token ids, or {"text": str | "ids": list[int], "images": [[seed, width, height]]}.
Prompt = list[int] | dict


def run_engine(model: Path, prompts: list[Prompt], *, tp: int = 1, sp: int = 1,
               max_tokens: int = 8, prompt_logprobs: bool = True, timeout: int = 900,
               then: list[list[Prompt]] | None = None, env: dict[str, str] | None = None,
               **engine_kwargs) -> Run:
    """Greedy-decode ``prompts`` and return tokens and logprobs.  A prompt is
    token ids, or text with images for a multimodal checkpoint (then the
    engine tokenizes: the processor expands each image placeholder); the
    child draws each image from its seed, so every layout sees the same
    pixels.
    ``then``: more batches, each submitted after the one before has finished
    and without prompt logprobs (a request with prompt logprobs neither
    fills nor reads the prefix cache); their results follow the first
    batch's."""
    batches = [prompts] + list(then or [])
    spec = dict(model=str(model), batches=batches, max_tokens=max_tokens,
                prompt_logprobs=prompt_logprobs,
                engine=dict(tensor_parallel_size=tp, **engine_kwargs))
    if sp != 1:
        spec["engine"]["sequence_parallel_size"] = sp
    world = tp * sp * engine_kwargs.get("pipeline_parallel_size", 1)
    env = {**default_env(world), **(env or {})}
    if engine_kwargs.get("shift_parallel") or sp > 1:
        # The per-rank reports are functions sent to the workers.
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    remove_stale_cpu_shm()
    forked = _FORKER.run(spec, env, timeout) if FORK else None
    if forked is None:
        proc = subprocess.run([sys.executable, str(HERE / "engine.py"), json.dumps(spec)],
                              env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
        forked = proc.returncode, proc.stdout
    returncode, out = forked
    found = [line for line in out.splitlines() if line.startswith(RESULT)]
    if returncode != 0 or not found:
        raise RuntimeError(f"engine run failed (rc={returncode}, tp={tp}, sp={sp}):\n"
                           + failure_excerpt(out))
    res = json.loads(found[-1][len(RESULT):])
    top = [[{int(t): lp for t, lp in pos.items()} for pos in seq] for seq in res["top"]]
    return Run(res["tokens"], res["logprobs"], res["prompt_logprobs"], res["cached_tokens"],
               res["prompt_ids"], res.get("spec", {}), res["seconds"], res.get("shift", []),
               top, res.get("gathers", []), res.get("experts", []), out)


def remove_stale_cpu_shm() -> None:
    """Unlink the shared memory that no live process maps and that vLLM's
    CPU communicator left behind.

    Why: the communicator of each TP/PP group makes /dev/shm segments named
    by the port of the engine's TCP store and the group's ranks, and never
    unlinks them.  A later engine whose store gets the same port (the
    kernel picks it) fails to start: "create shm in SHMManager failed.
    errno: 17" on the rank that creates the group's segment, and the other
    ranks then lose the store ("Failed to recv, got 0 bytes").  A suite of
    a few hundred engines met that once in a CI run; it also held ~4 MiB
    of memory per rank per engine until the machine restarted.  Called
    before each engine and server starts; a running engine's segments are
    mapped by its ranks, so they stay."""
    shm = Path("/dev/shm")
    names = {p.name for p in shm.glob("*-cpushm_*")} if shm.is_dir() else set()
    if not names:
        return
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:               # the process exited, or is not ours to read
            continue
        mapped.update(line.rsplit("/", 1)[-1] for line in text.splitlines()
                      if "/dev/shm/" in line)
    for name in names - mapped:
        (shm / name).unlink(missing_ok=True)


def failure_excerpt(out: str, tail: int = 5000) -> str:
    """What a failed run printed, cut for a test report: the first error
    line of each process (a rank that died first often explains why the
    others failed, and its lines scroll out of the tail) and then the
    tail."""
    firsts: dict[str, str] = {}
    for line in out.splitlines():
        if re.search(r"\w(Error|Exception)\b: |Killed|signal \d+", line):
            who = line.split(")", 1)[0] if line.startswith("(") else "main"
            firsts.setdefault(who, line)
    head = "".join(line + "\n" for line in firsts.values())
    return ("the first error of each process:\n" + head + "... the run's last lines:\n"
            + out[-tail:])


def image(seed: int, width: int, height: int):
    """Seeded random pixels: every layout, and the GPU harness's, sees the same image."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _prompt(p: Prompt) -> dict:
    if isinstance(p, list):
        return {"prompt_token_ids": p}
    out = {"prompt_token_ids": p["ids"]} if "ids" in p else {"prompt": p["text"]}
    if p.get("images"):
        out["multi_modal_data"] = {"image": [image(*i) for i in p["images"]]}
    return out


def inspect_models_here() -> None:
    """vLLM inspects a model class (``_ModelInfo``: PP, multimodal, hybrid,
    ...) in a fresh interpreter, so that the process asking keeps CUDA
    uninitialised; that interpreter imports vLLM again, ~9 s of CPU for
    each class a cache root has not seen (harness.repo).  A test process
    has no CUDA to keep: the same inspection runs in it, and its result
    goes to the same cache."""
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()


def _child(spec: dict, fork_workers: bool = False) -> None:
    import time

    from vllm import LLM, SamplingParams

    inspect_models_here()

    engine = dict(enforce_eager=True, max_model_len=1024, seed=0, dtype="float32",
                  skip_tokenizer_init=True, enable_prefix_caching=True,
                  kv_cache_memory_bytes=KV_CACHE_BYTES)
    engine.update(spec["engine"])
    speculating = "speculative_config" in engine
    if speculating:
        engine["disable_log_stats"] = False       # the draft/accept counters
    if any(isinstance(p, dict) for batch in spec["batches"] for p in batch):
        engine["skip_tokenizer_init"] = False     # text prompts, images
    if (engine.get("tensor_parallel_size", 1) * engine.get("sequence_parallel_size", 1)
            * engine.get("pipeline_parallel_size", 1)) > 1:
        engine.setdefault("distributed_executor_backend", "mp")
    if fork_workers:
        _fork_workers()
    t0 = time.time()
    llm = LLM(spec["model"], **engine)

    def params(prompt_logprobs: bool) -> SamplingParams:
        return SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0,
                              logprobs=TOP_LOGPROBS,
                              prompt_logprobs=0 if prompt_logprobs else None,
                              ignore_eos=True, detokenize=False)

    shift_on = engine.get("shift_parallel", False)
    before = llm.collective_rpc(_shift_report) if shift_on else []
    outs = []
    for i, batch in enumerate(spec["batches"]):
        # Later batches go without prompt logprobs: such requests bypass the
        # prefix cache (SamplingParams decides that when it is built).
        outs += llm.generate([_prompt(p) for p in batch],
                             params(spec["prompt_logprobs"] and i == 0))
    res = {"tokens": [], "logprobs": [], "prompt_logprobs": [], "cached_tokens": [],
           "prompt_ids": [], "top": [], "seconds": time.time() - t0}
    for o in outs:
        c = o.outputs[0]
        res["tokens"].append(list(c.token_ids))
        res["logprobs"].append([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
        res["top"].append([{t: x.logprob for t, x in lp.items() if x.rank <= TOP_LOGPROBS}
                           for lp in c.logprobs])
        plp = []
        for t, lp in zip(o.prompt_token_ids, o.prompt_logprobs or []):
            plp.append(None if lp is None else lp[t].logprob)
        res["prompt_logprobs"].append(plp)
        res["cached_tokens"].append(o.num_cached_tokens or 0)
        res["prompt_ids"].append(list(o.prompt_token_ids))
    if speculating:
        res["spec"] = spec_counts(llm)
    if engine.get("sequence_parallel_size", 1) > 1:
        res["gathers"] = llm.collective_rpc(_gather_report)
    if engine.get("enable_expert_parallel") or engine.get("sequence_parallel_size", 1) > 1:
        res["experts"] = llm.collective_rpc(_experts_report)
    if shift_on:
        # Steps served per mode: the calls made while generating (the
        # engine's own profile and warm-up calls are left out).
        after = llm.collective_rpc(_shift_report)
        for b, a in zip(before, after):
            a["served"] = {m: a["calls"][m] - b["calls"][m] for m in a["calls"]}
        res["shift"] = after
    print(RESULT + json.dumps(res), flush=True)
    # Shut the engine down while everything it uses is alive: left to the
    # interpreter's exit, an in-process core's Ray executor kills its actors
    # after Ray's own exit hook has torn down the worker that owns them
    # (a fatal check in Ray, exit code 1, after the result).
    llm.llm_engine.engine_core.shutdown()


def spec_counts(llm) -> dict[str, float]:
    """Drafted and accepted tokens so far (only a speculative engine logs
    stats: get_metrics() asserts on any other)."""
    names = {"vllm:spec_decode_num_draft_tokens": "drafted",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    return {names[m.name]: m.value for m in llm.get_metrics() if m.name in names}


def _fork_workers() -> None:
    """Start the engine's workers by fork (module docstring: a forked child
    has imported vLLM and started no thread pool, so its forks start as
    spawned workers would after their imports).  Only the worker processes:
    vLLM's executor takes its start method from this module-level name."""
    import multiprocessing

    from vllm.v1.executor import multiproc_executor

    multiproc_executor.get_mp_context = lambda: multiprocessing.get_context("fork")


def _gather_report(worker) -> dict:
    """On one rank: forwards of the SP model that gathered only the
    sampled rows of the step, and those that gathered all of it; and the
    OpenMP threads the rank computes with (``cpu_env``: one)."""
    import torch
    from vllm.distributed import ulysses_model

    return {**ulysses_model.gather_counts(), "threads": torch.get_num_threads()}


def _experts_report(worker) -> dict:
    """On one rank, of every MoE layer's routed experts: which global
    experts this GPU holds (the SP model's), of how many; the bytes of
    their parameters' storages counted once across the SP model and Shift's
    full-TP model together ("bytes"), and that against the SP layer's alone
    ("together"; 1.0: the full-TP model holds the very tensors; 2.0: a copy)."""
    from vllm.distributed import shift

    def layers(model) -> dict:
        return {n: m for n, m in model.named_modules()
                if hasattr(m, "expert_map_manager") and hasattr(m, "global_num_experts")}

    def storages(*mods) -> dict[int, int]:
        # The experts' own parameters (w13_*, w2_*), not the router's state
        # a layer may keep beside them (GLM-4.5's score correction bias).
        return {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes()
                for m in mods for n, p in m.named_parameters(recurse=False)
                if n.startswith(("w13_", "w2_"))}

    sp_layers = layers(worker.model_runner.model)
    full = shift.full_tp_model()
    full_layers = layers(full) if full is not None else {}
    out = []
    for name, layer in sp_layers.items():
        emap = layer.expert_map_manager.expert_map
        held = (list(range(layer.global_num_experts)) if emap is None
                else [g for g, local in enumerate(emap.tolist()) if local >= 0])
        mine = sum(storages(layer).values())
        both = sum(storages(layer, *([full_layers[name]] if name in full_layers else [])).values())
        out.append({"layer": name, "held": held, "of": layer.global_num_experts,
                    "bytes": both, "together": both / mine})
    return {"layers": out}


def _shift_report(worker) -> dict:
    """On one rank: model calls per Shift mode, and whether the full-TP
    model's attention layers hold the very tensors of the SP model's: the
    same memory in the same layout.  A state-keeping layer (Gated-DeltaNet)
    holds [conv, ssm]; from vLLM 0.32 each layer makes its own views of the
    cache's pages, with its own state shapes, so they are compared as views."""
    from vllm.distributed import shift

    def tensors(kv) -> list:
        return list(kv) if isinstance(kv, (list, tuple)) else [kv]

    def same(a, b) -> bool:
        return (a.data_ptr(), a.shape, a.stride(), a.dtype) == \
            (b.data_ptr(), b.shape, b.stride(), b.dtype)

    sp_layers = worker.model_runner.compilation_config.static_forward_context
    full_layers = shift._STATE.layers
    names = [n for n, layer in sp_layers.items()
             if hasattr(layer, "kv_cache") and n in full_layers]
    pairs = [(tensors(full_layers[n].kv_cache), tensors(sp_layers[n].kv_cache)) for n in names]
    shared = [len(f) == len(s) and all(map(same, f, s)) for f, s in pairs]
    return {
        "calls": shift.step_counts(),
        "layers": len(names),
        "same_tensors": all(shared),
        "storages": len({t.untyped_storage().data_ptr() for n in names
                         for t in tensors(sp_layers[n].kv_cache)}),
        "state_layers": sum(isinstance(sp_layers[n].kv_cache, (list, tuple)) for n in names),
        "shared_bytes": shift._STATE.shared_bytes,
        "reads": shift._STATE.reads,
    }


# SP_TEST_FORK=0: every run in a fresh interpreter.
FORK = os.environ.get("SP_TEST_FORK", "1") != "0"
# What a forked child may set differently from the forker: vLLM reads these
# when the engine starts (vllm.envs is read on access), never at import; and
# pytest's name of the running test, which no import reads.  Without it every
# run outside the phase of the one that started the forker (the first
# fixture's) took a fresh interpreter: the forker served almost nothing
# (0.32.0, test_e2e_shift.py: 137 s, 111 s with it here, 59 s with the
# workers forked too).
READ_LATE = {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_ENABLE_V1_MULTIPROCESSING",
             "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_DIST_IDENT", "PYTEST_CURRENT_TEST"}
# Folders a run adds to PYTHONPATH (the suffix drafter's package): the child
# puts them on sys.path itself; vLLM finds plugins there when the engine
# starts, and its spawned workers read PYTHONPATH as usual.
PATH = "PYTHONPATH"


class Forker:
    """A process children are forked from (``engine.py --forker``), for the
    runs of one environment (``home()``: what a run's environment must equal
    in all but READ_LATE), started at the first run that can use it and kept
    for the session.  Protocol, one line each way: the test sends {spec, env,
    out}; the forker answers ``pid <child>`` and, once the child has exited,
    ``exit <code>``; the child's stdout and stderr go to ``out``.  A spec
    with ``call`` ("module:function") and ``args`` runs that function of the
    harness in the child (its return value the exit code: the gloo unit
    tests' launcher); any other, an engine (``_child``)."""

    def __init__(self, home: Callable[[], dict[str, str]]):
        self.home = home
        self.proc: subprocess.Popen | None = None
        self.broken = False
        self.buf = b""

    def _start(self) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="engine-forker-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "engine.py"), "--forker"],
                                     env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log,
                                     start_new_session=True)
        atexit.register(self.stop)
        if self._line(300) != "ready":
            raise RuntimeError(f"engine forker did not start; see {self.log.name}")

    def _line(self, timeout: float) -> str | None:
        """The forker's next line, or None after ``timeout`` seconds."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            if not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise OSError("engine forker exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc:
            Path(self.log.name).unlink(missing_ok=True)

    def run(self, spec: dict, env: dict[str, str], timeout: float) -> tuple[int, str] | None:
        """(exit code, output) of the run in a forked child; None where the
        run needs a fresh interpreter (its environment) or the forker is
        gone (then every later run gets one too)."""
        if self.broken or _early(env) != _early(self.home()):
            return None
        if self.proc is None:
            self.env = _early(env)
            try:
                self._start()
            except (OSError, RuntimeError):
                self.broken = True
                return None
        elif _early(env) != self.env:       # the session's environment changed since
            return None
        with tempfile.NamedTemporaryFile(prefix="engine-", suffix=".log") as out:
            try:
                req = json.dumps(dict(spec=spec, env=env, out=out.name)) + "\n"
                self.proc.stdin.write(req.encode())
                self.proc.stdin.flush()
                pid = int(self._line(60).split()[1])
            except (OSError, AttributeError, ValueError, IndexError):
                self.broken = True
                return None
            line = self._line(timeout)
            if line is None:
                os.killpg(pid, signal.SIGKILL)     # the child leads its own session
                self._line(60)
                raise subprocess.TimeoutExpired("engine run", timeout,
                                                Path(out.name).read_text()[-6000:])
            return int(line.split()[1]), Path(out.name).read_text()



def _exit(status: int) -> None:
    """The child's exit: the atexit hooks, as any interpreter runs them
    (multiprocessing's, vLLM's), then no further: the interpreter's own
    teardown that follows frees nothing the system would not, and took
    ~2 s of every run (no Python frame left in it)."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(status)


def _early(env: dict[str, str]) -> dict[str, str]:
    """What the child must share with the forker: all but READ_LATE, and
    PYTHONPATH where the run's only adds folders in front."""
    out = {k: v for k, v in env.items() if k not in READ_LATE}
    base = os.environ.get(PATH)
    if out.get(PATH, "").endswith(base or ""):
        out.pop(PATH, None)
        if base is not None:
            out[PATH] = base
    return out


def default_env(world: int = 1) -> dict[str, str]:
    """A run's environment unless the test adds to it."""
    env = {**os.environ, **cpu_env(world), **IN_PROCESS}
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    return env


_FORKER = Forker(default_env)


def fork_call(call: str, args: list, env: dict[str, str], timeout: float) -> tuple[int, str] | None:
    """(exit code, output) of ``call`` ("module:function" of the harness, its
    return value the exit code) in a child of the engine forker; None where
    the run needs a fresh interpreter (Forker.run)."""
    if not FORK:
        return None
    env = {**env, PATH: os.pathsep.join([str(HERE.parent), *filter(None, [env.get(PATH)])])}
    return _FORKER.run({"call": call, "args": list(args)}, env, timeout)


def _forker() -> None:
    # Answers go to the test on a descriptor of their own; whatever else is
    # printed (vLLM logs to stdout) goes to the forker's log.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    from vllm import LLM, SamplingParams  # noqa: F401  (what every child imports)
    # What a linear layer imports when first built (its kernels; on 0.33 ~600
    # modules, ~3 s of every engine's or gloo rank's start): once, here.
    with contextlib.suppress(ImportError):
        import vllm.model_executor.kernels.linear  # noqa: F401
    inspect_models_here()       # for the CLI refusals and gloo launchers forked from here

    def answer(line: str) -> None:
        answers.write(line + "\n")
        answers.flush()

    answer("ready")
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            fd = os.open(req["out"], os.O_WRONLY | os.O_TRUNC)
            os.dup2(fd, 1), os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            answers.close()
            os.environ.clear()
            os.environ.update(req["env"])
            added = os.environ.get(PATH, "").split(os.pathsep)
            sys.path[:0] = [d for d in added if d and d not in sys.path]
            spec, status = req["spec"], 0
            try:
                if "call" in spec:
                    module, name = spec["call"].split(":")
                    status = getattr(importlib.import_module(module), name)(*spec["args"])
                else:
                    _child(spec, fork_workers=True)
            except BaseException:
                traceback.print_exc()
                status = 1
            _exit(status)
        answer(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        answer(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    # Run as a script, this directory heads sys.path: drop it, so that no
    # harness module (server, config, ...) shadows a package vLLM imports.
    if sys.path and Path(sys.path[0]).resolve() == HERE:
        sys.path.pop(0)
    if sys.argv[1] == "--forker":
        _forker()
    else:
        try:
            _child(json.loads(sys.argv[1]))
        except BaseException:
            traceback.print_exc()
            _exit(1)
        _exit(0)
