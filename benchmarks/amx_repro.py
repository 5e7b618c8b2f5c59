#!/usr/bin/env python3
"""docs/reliability.md's AMX reproduction, every layout of the hybrid tests
at once: the suite's test hybrid (``harness.models.make_qwen3_next``, 4
linear key heads) on the workload at TP=1, TP=2, TP=4, SP=2 and TP=2 x SP=2,
each compared with TP=1 and with TP=4 (``harness.compare.agreeing``: per
prompt, the greedy tokens shared before the first that differs, and the
largest logprob difference up to there).  What it settles on a host: whether
upstream's TP=4 departs from TP=1 there (the AMX fault), and whether
TP=2 x SP=2 computes exactly what TP=4 does (the per-rank-shape argument).

Run it with the CPU test venv's Python (CUDA_VISIBLE_DEVICES empty) in the staged tests/,
whose harness (of the staged release) then comes first on the path:

    cd STAGED/tests && PYTHONPATH=REPO python -m benchmarks.amx_repro OUT.json [--models DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from harness.compare import agreeing
from harness.models import GDN, make_qwen3_next
from harness.workload import run

LAYOUTS = {"tp1": {}, "tp4": {"tp": 4}, "tp2": {"tp": 2}, "sp2": {"sp": 2},
           "tp2sp2": {"tp": 2, "sp": 2}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--models", type=Path, default=Path("/tmp/amx-repro-models"))
    args = ap.parse_args()

    model = make_qwen3_next(args.models)
    runs, report = {}, {"layouts": {}}
    for name, kw in LAYOUTS.items():
        start = time.time()
        try:
            runs[name] = run(model, **kw, **GDN)
        except Exception:       # one layout's failure still leaves the others' numbers
            report["layouts"][name] = {"error": traceback.format_exc()[-3000:]}
            print(f"{name}: FAILED", flush=True)
            continue
        r = runs[name]
        row = {"seconds": round(time.time() - start, 1), "tokens": r.tokens}
        for ref in ("tp1", "tp4"):
            if ref in runs and ref != name:
                lengths, worst = agreeing(runs[ref], r)
                row[f"vs_{ref}"] = {"same_tokens": r.tokens == runs[ref].tokens,
                                    "agreeing": lengths, "max_logprob_diff": round(worst, 4)}
        report["layouts"][name] = row
        print(name, {k: v for k, v in row.items() if k != "tokens"}, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if "tp4" in runs and "tp1" in runs:
        lengths, worst = agreeing(runs["tp1"], runs["tp4"])
        print("docs/reliability.md's line (TP=4 vs TP=1):",
              runs["tp1"].tokens == runs["tp4"].tokens, (lengths, worst))
    sys.exit(1 if any("error" in row for row in report["layouts"].values()) else 0)


if __name__ == "__main__":
    main()
