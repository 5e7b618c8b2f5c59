#!/usr/bin/env bash
# On the GPU host, in a folder holding part00, part01, ... from stage.py (parts
# arrive over several calls: collect them in one folder first):
#   bash unpack.sh PARTS_DIR [REPORT]
# Installs the official vLLM wheel into the image's own Python environment the
# way a user's `pip install vllm` does there: pip resolves against what the
# image has, taking what it lacks from the staged wheels (--no-index: the host
# has no network).  REPORT (default PARTS_DIR/env.txt) gets `pip check`'s
# verdict, the versions that decide the GPU paths, the install's lock, and
# smoke.py's verdict on the install (torch imports, a CUDA matmul, an NCCL
# all-reduce over 2 GPUs): `smoke: ok`, else this script fails with one line
# and session.sh runs no plan on the install.  --no-compile: Python writes the
# bytecode of what a run imports when it first imports it, instead of pip
# compiling every module of the environment inside the lease's install minutes.
set -euo pipefail
parts=$1; report=${2:-$1/env.txt}
# where a lease's install minutes go, one line a phase
stamp() { echo "unpack.sh: $(date +%T) $*"; }
stamp "checking the parts"
got=$(cat "$parts"/part* | sha256sum | cut -d' ' -f1)
if [[ "$got" != "$(cat "$parts/bundle.sha256")" ]]; then
  echo "unpack.sh: parts are incomplete or damaged (sha256 $got)" >&2; exit 1
fi
work=$(mktemp -d)
stamp "unpacking"
cat "$parts"/part* | tar x -C "$work"
stamp "pip install"
if [[ -f $work/bundle/overrides.txt ]]; then
  # A pin of the official wheel the index cannot satisfy (stage.py): the dependencies
  # resolved for ours, the official wheel without its own; pip check names the pin.
  grep -v "kept from the image" "$work/bundle/lock.txt" | cut -d' ' -f1 > "$work/added.txt"
  python3 -m pip install -q --no-index --no-cache-dir --no-compile --find-links "$work/bundle/deps" \
    -r "$work/added.txt"
  python3 -m pip install -q --no-index --no-cache-dir --no-compile --no-deps "$work"/bundle/vllm-*.whl
else
  python3 -m pip install -q --no-index --no-cache-dir --no-compile --find-links "$work/bundle/deps" \
    "$work"/bundle/vllm-*.whl
fi
stamp "pip check and versions"
{
  echo "== python: $(command -v python3) ($(python3 -V 2>&1))"
  [[ -f $work/bundle/overrides.txt ]] && { echo "== requirement overrides (not pip install vllm's own environment)"; cat "$work/bundle/overrides.txt"; }
  echo "== pip check"
  python3 -m pip check 2>&1 && echo "pip check: clean" || echo "pip check: NOT clean"
  echo "== versions"
  python3 - <<'PY'
import importlib.metadata as md
import torch
for name in ("vllm", "torch", "triton", "flashinfer-python", "nvidia-nccl-cu13", "nvidia-cutlass-dsl",
             "apache-tvm-ffi", "transformers", "numpy", "numba"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
print("torch.cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))
PY
  echo "== staged lock (user_env.py)"
  cat "$work/bundle/lock.txt"
} > "$report" 2>&1 || true    # a torch that cannot load: smoke.py's verdict says so
rm -rf "$work"
echo "== smoke check (smoke.py)" >> "$report"
stamp "smoke check"
rc=0
timeout 300 python3 "$(dirname "$0")/smoke.py" >> "$report" 2>&1 || rc=$?
if ! grep -q "^smoke: ok" "$report" && ! grep -q "^smoke: FAILED" "$report"; then
  echo "smoke: FAILED: smoke.py ended without a verdict (exit $rc; 124: hung, killed after" \
    "300 s)" >> "$report"
fi
stamp "done"
grep -E "^pip check|^vllm==|^flashinfer|^torch|^smoke:" "$report"
if ! grep -q "^smoke: ok" "$report"; then
  echo "unpack.sh: the install FAILED its smoke check: $(grep "^smoke:" "$report"); see $report" >&2
  exit 1
fi
