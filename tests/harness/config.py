"""Engine-config and CLI checks without an engine: what the config tests
of SP and of Shift share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from . import engine
from .repo import official_wheel

TESTS = Path(__file__).resolve().parents[1]
# The ParallelConfig fields our patches add, and what they hold when unset.
OUR_FIELDS = {"sequence_parallel_size": 1, "shift_parallel": False,
              "shift_parallel_threshold": 1024}


def engine_config(model, **kw):
    from vllm.engine.arg_utils import EngineArgs

    engine.inspect_models_here()
    kw.setdefault("max_model_len", 256)
    return EngineArgs(model=str(model), skip_tokenizer_init=True, enforce_eager=True,
                      **kw).create_engine_config()


def config_hash(section) -> str:
    """A config section's hash as its release computes it: ``compute_hash()``
    up to vLLM 0.33, the digest of ``compile_factors()`` from 0.34."""
    if hasattr(section, "compute_hash"):
        return section.compute_hash()
    from vllm.config.utils import hash_factors

    return hash_factors(section.compile_factors())


def hash_factors(section, ignored: set[str]) -> dict:
    """A config section's hash factors (``get_hash_factors`` up to vLLM 0.33,
    ``get_compile_factors`` from 0.34)."""
    from vllm.config import utils

    get = getattr(utils, "get_hash_factors", None) or utils.get_compile_factors
    return get(section, ignored)


def config_facts(cfg) -> dict:
    """What of an engine config upstream vLLM would build alike: the
    ParallelConfig's hash factors (every field, world size included), the
    per-GPU attention and KV heads and the compilation config's hash.  Our
    own fields are set apart under ``"ours"`` (upstream has none)."""
    pc = cfg.parallel_config
    factors = hash_factors(pc, set())
    ours = {k: factors.pop(k) for k in OUR_FIELDS if k in factors}
    facts = {"parallel": factors, "ours": ours,
             "heads": [cfg.model_config.get_num_attention_heads(pc),
                       cfg.model_config.get_num_kv_heads(pc)],
             "compilation": config_hash(cfg.compilation_config)}
    return json.loads(json.dumps(facts))     # as upstream_config_facts reads them back


def upstream_config_facts(model: Path, workdir: Path, **kw) -> dict:
    """config_facts of the engine config that upstream vLLM builds: the
    official wheel of the release and flavor under test (unpatched), its
    Python unpacked into ``workdir`` (building a config loads no kernel) and
    imported ahead of ours in a subprocess, so that nothing of our patches
    or overlay is in it."""
    wheel = official_wheel()
    if not wheel.exists():
        raise AssertionError(f"no {wheel}: run ./build.sh first (it fetches the official wheel)")
    upstream = workdir / "upstream"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(upstream, [n for n in z.namelist()
                                if n.startswith("vllm/") and n.endswith(".py")])
    code = ("import json, sys, vllm; from harness.config import config_facts, engine_config; "
            "assert vllm.__file__.startswith(sys.argv[1]), vllm.__file__; "
            "cfg = engine_config(sys.argv[2], **json.loads(sys.argv[3])); "
            "print(json.dumps(config_facts(cfg)))")
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR",
               PYTHONPATH=os.pathsep.join([str(upstream), str(TESTS)]))
    proc = subprocess.run([sys.executable, "-c", code, str(upstream), str(model), json.dumps(kw)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_config(path: Path, cfg: dict) -> Path:
    """A model directory holding only ``config.json`` (a Hugging Face config
    as a dict): enough for the config checks, which never load weights."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def error_line(excinfo, needle: str) -> str:
    lines = [line for line in str(excinfo.value).splitlines() if needle in line]
    assert lines, str(excinfo.value)
    return lines[0]


def cli_rejects(model: Path, args: list[str]) -> str:
    """`vllm serve MODEL ARGS` must exit non-zero before any worker or
    engine core starts; returns its output for the test's own message check.
    The command's own entry point (``vllm.entrypoints.cli.main``) runs in a
    child forked from the engine forker, which has imported vLLM: a fresh
    interpreter spent ~15 s of each such test importing it (harness.engine
    runs it in one where the environment asks for it, SP_TEST_FORK=0)."""
    argv = ["serve", str(model), *args, "--max-model-len", "256", "--enforce-eager",
            "--skip-tokenizer-init"]
    env = engine.default_env()
    forked = engine.fork_call("harness.config:serve_cli", argv, env, timeout=180)
    if forked is None:
        proc = subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", *argv],
                              capture_output=True, text=True, timeout=180, env=env)
        forked = proc.returncode, proc.stdout + proc.stderr
    returncode, out = forked
    assert returncode != 0, out[-3000:]
    assert "Worker" not in out and "EngineCore" not in out, "workers must not start"
    return out


def serve_cli(*argv: str) -> int:
    """``vllm ARGV`` in this process (a forked child): its exit status."""
    sys.argv = ["vllm", *argv]
    from vllm.entrypoints.cli.main import main

    try:
        main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    return 0
