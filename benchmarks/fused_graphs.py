"""Which of an engine's compiled graphs run FlashInfer's fused all-reduce + RMSNorm.

A fusion workspace in the log says a pass asked for one, not that any graph uses it: on
4xH100 (2026-11-28) Shift's full-TP model built its workspace and compiled every graph
unfused (its compile ranges ended above the fusion's size limit).  vLLM logs each model's
torch.compile cache folder (rank 0's line: ``Using cache directory: DIR for vLLM's
torch.compile``, DIR ending in the model's tag: ``backbone``, ``shift_full_tp``,
``draft_model``, ``eagle_head``); each range it compiled is a set of
``artifact_compile_range_<start>_<end>_subgraph_<i>`` files there, and a fused range's
code calls ``flashinfer_trtllm_fused_allreduce_norm``.  So, per model tag and range:
fused or not.  Run on the host after the engine started; a folder gone by then (another
host's cache) is reported as missing, not as unfused.
"""

from __future__ import annotations

import re
from pathlib import Path

CACHE_LINE = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
ARTIFACT = re.compile(r"artifact_compile_range_(\d+)_(\d+)_subgraph_\d+")
FUSED_OP = b"flashinfer_trtllm_fused_allreduce_norm"


def fused_graphs(log_text: str) -> dict[str, dict[str, bool] | str]:
    """{model tag: {"<start>-<end>": fused?} or "missing"} for every cache folder the log
    names (the last folder per tag)."""
    folders = {Path(d).name: Path(d) for d in CACHE_LINE.findall(log_text)}
    out: dict[str, dict[str, bool] | str] = {}
    for tag, folder in folders.items():
        if not folder.is_dir():
            out[tag] = "missing"
            continue
        ranges: dict[str, bool] = {}
        for f in sorted(folder.iterdir()):
            m = ARTIFACT.fullmatch(f.name)
            if m:
                key = f"{m[1]}-{m[2]}"
                ranges[key] = ranges.get(key, False) or _calls_fused_op(f)
        out[tag] = dict(sorted(ranges.items(), key=lambda kv: int(kv[0].split("-")[0])))
    return out


def _calls_fused_op(path: Path) -> bool:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return any(FUSED_OP in p.read_bytes() for p in files)


def summary(graphs: dict) -> str:
    """One cell: each tag's fused ranges ("shift_full_tp fused 1-128 of 1-128, 129-4096")."""
    cells = []
    for tag, ranges in graphs.items():
        if isinstance(ranges, str):
            cells.append(f"{tag} {ranges}")
            continue
        fused = [r for r, f in ranges.items() if f]
        cells.append(f"{tag} fused {', '.join(fused) or 'none'} of {', '.join(ranges) or 'none'}")
    return "; ".join(cells)
