"""Engine-config and CLI checks without an engine: what the config tests
of SP and of Shift share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def engine_config(model, **kw):
    from vllm.engine.arg_utils import EngineArgs

    kw.setdefault("max_model_len", 256)
    return EngineArgs(model=str(model), skip_tokenizer_init=True, enforce_eager=True,
                      **kw).create_engine_config()


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
    engine core starts; returns its output for the test's own message check."""
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
    proc = subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
                           *args, "--max-model-len", "256", "--enforce-eager",
                           "--skip-tokenizer-init"],
                          capture_output=True, text=True, timeout=180, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Worker" not in out and "EngineCore" not in out, "workers must not start"
    return out
