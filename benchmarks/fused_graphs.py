"""Which of an engine's compiled graphs run FlashInfer's fused all-reduce + RMSNorm.

A fusion workspace in the log says a pass asked for one, not that any graph uses it: a
model can build its workspace and compile every graph unfused (its compile ranges ending
above the fusion's size limit).  vLLM logs each model's
torch.compile cache folder (rank 0's line: ``Using cache directory: DIR for vLLM's
torch.compile``, DIR ending in the model's tag: ``backbone``, ``shift_full_tp``,
``draft_model``, ``eagle_head``); each range it compiled is a set of
``artifact_compile_range_<start>_<end>_subgraph_<i>`` files there, and a fused range's
code calls ``flashinfer_trtllm_fused_allreduce_norm``.  So, per model tag and range:
fused or not.  Run on the host after the engine started; a folder gone by then (another
host's cache) is reported as missing, not as unfused.

vLLM 0.32+ on torch 2.12+ (its default ``VLLM_USE_MEGA_AOT_ARTIFACT``) keeps no range files
in that folder: each model's ranges go into one file, logged as ``[<tag>] saved AOT compiled
function to FILE`` (or ``[<tag>] Directly load AOT compilation from path FILE``).  Torch's
pickle of it holds vLLM's own pickle (``VllmSerializableFunction``), whose
``StandaloneCompiledArtifacts`` maps ``<submodule>_(<start>, <end>)`` to the compiled
code of that piece; both are read here with stand-ins for every class, so neither torch
nor vLLM is imported or run.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

CACHE_LINE = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
AOT_LINE = re.compile(r"\[(\w+)\] (?:saved AOT compiled function to|Directly load AOT "
                      r"compilation from path) (\S+)")
ARTIFACT = re.compile(r"artifact_compile_range_(\d+)_(\d+)_subgraph_\d+")
AOT_KEY = re.compile(r".+_\((\d+), (\d+)\)")
FUSED_OP = b"flashinfer_trtllm_fused_allreduce_norm"


def fused_graphs(log_text: str) -> dict[str, dict[str, bool] | str]:
    """{model tag: {"<start>-<end>": fused?} or "missing"} for every cache folder the log
    names (the last folder per tag)."""
    folders = {Path(d).name: Path(d) for d in CACHE_LINE.findall(log_text)}
    aot_files = {tag: Path(f) for tag, f in AOT_LINE.findall(log_text)}
    out: dict[str, dict[str, bool] | str] = {}
    for tag, path in aot_files.items():
        out[tag] = _aot_ranges(path) if path.is_file() else "missing"
    for tag, folder in folders.items():
        if tag in out:
            continue
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


def _aot_ranges(path: Path) -> dict[str, bool] | str:
    """{"<start>-<end>": fused?} from one mega AOT artifact."""
    try:
        outer = _load_with_stand_ins(path.read_bytes())
    except Exception as e:  # noqa: BLE001 - a format this reader does not know
        return f"unreadable ({type(e).__name__})"
    for blob in _walk(outer):
        if not isinstance(blob, (bytes, bytearray)):
            continue
        try:
            inner = _load_with_stand_ins(bytes(blob))
        except Exception:  # noqa: BLE001 - other bytes (graphs, code)
            continue
        for artifacts in _walk(inner):
            names = getattr(artifacts, "submodule_bytes", None)
            store = getattr(artifacts, "submodule_bytes_store", None)
            if not (isinstance(names, dict) and isinstance(store, dict)):
                continue
            ranges: dict[str, bool] = {}
            for key, digest in names.items():
                m = AOT_KEY.fullmatch(key)
                if m:
                    r = f"{m[1]}-{m[2]}"
                    ranges[r] = ranges.get(r, False) or FUSED_OP in store.get(digest, b"")
            return dict(sorted(ranges.items(), key=lambda kv: int(kv[0].split("-")[0])))
    return "unreadable (no compiled artifacts in it)"


class _StandIn:
    """Whatever class a pickle names: keeps its arguments and state, builds nothing."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        self.__dict__["_args"] = args

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:      # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_state"] = state

    def __call__(self, *args, **kwargs):
        return _StandIn(*args)

    def __setitem__(self, key, value):
        self.__dict__.setdefault("_items", {})[key] = value

    def append(self, value):
        self.__dict__.setdefault("_list", []).append(value)

    def extend(self, values):
        self.__dict__.setdefault("_list", []).extend(values)


_PLAIN = {("builtins", n) for n in ("dict", "list", "set", "frozenset", "tuple", "bytes",
                                     "bytearray", "str", "int", "float", "complex", "bool",
                                     "slice", "range")}
_PLAIN |= {("collections", "OrderedDict"), ("collections", "defaultdict")}


class _StandInUnpickler(pickle.Unpickler):
    classes: dict[tuple[str, str], type] = {}

    def find_class(self, module, name):
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        key = (module, name)
        if key not in self.classes:
            self.classes[key] = type(name, (_StandIn,), {"__module__": module})
        return self.classes[key]

    def persistent_load(self, pid):
        return _StandIn(pid)


def _load_with_stand_ins(data: bytes):
    if not data[:1] == b"\x80":
        raise ValueError("not a pickle")
    return _StandInUnpickler(io.BytesIO(data)).load()


def _walk(obj):
    """Every object reachable from obj (containers and stand-ins' state), once."""
    seen, stack = set(), [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        yield o
        if isinstance(o, dict):
            stack.extend([*o.keys(), *o.values()])
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif isinstance(o, _StandIn):
            stack.append(o.__dict__)


def _calls_fused_op(path: Path) -> bool:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return any(FUSED_OP in p.read_bytes() for p in files)


def summary(graphs: dict) -> str:
    """One cell: each tag's fused ranges ("shift_full_tp fused 1-128 of 1-128, 129-4096")."""
    cells = []
    for tag, ranges in graphs.items():
        if isinstance(ranges, str) or not ranges:
            cells.append(f"{tag} {ranges or 'no compiled range found'}")
            continue
        fused = [r for r, f in ranges.items() if f]
        cells.append(f"{tag} fused {', '.join(fused) or 'none'} of {', '.join(ranges) or 'none'}")
    return "; ".join(cells)
