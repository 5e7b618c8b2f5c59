#!/usr/bin/env bash
# On the GPU host, once every part from benchmarks/stage_cpu_tests.py is in PARTS_DIR:
#   bash benchmarks/unpack_cpu_tests.sh PARTS_DIR DEST [REPORT]
# -> DEST/venv    a venv of the image's Python 3.12 holding our CPU wheel and the staged
#                 wheels, installed by pip with --no-index against bundle/constraints.txt
#                 (CI's versions); made --without-pip (no ensurepip needed), or by hand
#                 (pyvenv.cfg + a link) where the venv module is missing; pip comes from
#                 the staged pip wheel, run as `python pip-*.whl/pip`
#    DEST/image   the image's packages the venv takes as they are (torch 2.11.0 and its
#                 CUDA libraries, ...: bundle/image.txt), linked from the image's
#                 site-packages, those distributions' files and nothing else; a .pth
#                 puts this folder on the venv's path after its own site-packages
#    DEST/bundle/repo   tests/ and VLLM_VERSION as staged: run pytest in repo/tests
# REPORT (default DEST/env.txt): pip check, the versions, torch's CPU capability, and
# `cpu-venv: ok` last, else this script fails.  Nothing of the image is changed.
# IMAGE_PYTHON: the image's Python (default python3, the one that holds torch).
set -euo pipefail
parts=$1 dest=$2
report=${3:-$dest/env.txt}
py=${IMAGE_PYTHON:-python3}
got=$(cat "$parts"/part* | sha256sum | cut -d' ' -f1)
if [[ "$got" != "$(cat "$parts/bundle.sha256")" ]]; then
  echo "unpack_cpu_tests.sh: parts are incomplete or damaged (sha256 $got)" >&2; exit 1
fi
"$py" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' || {
  echo "unpack_cpu_tests.sh: $py is not Python 3.12: the staged wheels are cp312" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
cat "$parts"/part* | tar x -C "$dest"
b=$dest/bundle

if ! "$py" -m venv --without-pip "$dest/venv" > "$dest/venv.log" 2>&1; then
  echo "unpack_cpu_tests.sh: '$py -m venv' failed ($(tail -1 "$dest/venv.log")); making the" \
    "venv by hand" >&2
  rm -rf "$dest/venv"
  base=$("$py" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
  mkdir -p "$dest/venv/bin" "$dest/venv/lib/python3.12/site-packages"
  ln -s "$base" "$dest/venv/bin/python"
  ln -s python "$dest/venv/bin/python3"
  printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' \
    "$(dirname "$base")" "$("$py" -c 'import platform; print(platform.python_version())')" \
    > "$dest/venv/pyvenv.cfg"
fi
vpy=$dest/venv/bin/python

# The image's packages named in image.txt, linked at the shallowest path that
# holds files of those distributions alone (torch/, nvidia/ whole; a namespace
# shared with another package, such as cuda/, folder by folder).
"$py" - "$b/image.txt" "$dest/image" <<'PY'
import importlib.metadata as md
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

def norm(s):
    return re.sub(r"[-_.]+", "_", s).lower()

want = dict(line.split("==") for line in Path(sys.argv[1]).read_text().split())
want = {norm(k): v for k, v in want.items()}
out = Path(sys.argv[2])
found, owners, files = {}, defaultdict(set), {}
for d in md.distributions():
    n = norm(d.metadata["Name"] or "")
    if not n or n in found:
        continue                 # shadowed, as import would see it
    site = Path(d.locate_file(""))
    found[n] = (d, site)
    for f in d.files or []:
        parts = Path(f).parts
        if not parts or parts[0] == ".." or Path(f).is_absolute():
            continue             # scripts in bin/ and the like
        for i in range(1, len(parts) + 1):
            owners[(site, parts[:i])].add(n)
        files.setdefault(n, []).append(parts)
bad = [f"{n}: wanted {v}, the image has "
       + (found[n][0].version if n in found else "none") for n, v in sorted(want.items())
       if n not in found or found[n][0].version.split("+")[0] != v]
if bad:
    sys.exit("unpack_cpu_tests.sh: the image is not what was staged against "
             "(restage after refreshing benchmarks/host/image-cp312.json):\n  " + "\n  ".join(bad))
linked = set()
for n in want:
    d, site = found[n]
    for parts in files.get(n, []):
        for i in range(1, len(parts) + 1):
            if owners[(site, parts[:i])] <= want.keys():
                break
        prefix = parts[:i]
        if (site, prefix) in linked or not (site / Path(*prefix)).exists():
            continue
        linked.add((site, prefix))
        dst = out / Path(*prefix)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            os.symlink(site / Path(*prefix), dst)
print(f"image packages: {len(want)} linked into {out} ({len(linked)} links)")
PY
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$dest/image" > "$site/_image_packages.pth"

pipwhl=$(echo "$b"/wheels/pip-*.whl)
"$vpy" "$pipwhl/pip" install -q --no-index --no-cache-dir --disable-pip-version-check \
  --find-links "$b/wheels" -c "$b/constraints.txt" "$b"/wheels/vllm-*.whl -r "$b/requirements.txt"

{
  echo "== python: $vpy ($("$vpy" -V 2>&1)); image: $(command -v "$py")"
  echo "== pip check"
  "$vpy" -m pip check 2>&1 && echo "pip check: clean" || echo "pip check: NOT clean"
  echo "== versions (CUDA_VISIBLE_DEVICES empty)"
  CUDA_VISIBLE_DEVICES="" VLLM_LOGGING_LEVEL=ERROR "$vpy" - "$b/manifest.json" <<'PY'
import importlib.metadata as md
import json
import sys

import torch

staged = json.load(open(sys.argv[1]))
for name in ("vllm", "torch", "torchvision", "triton", "transformers", "numpy", "numba",
             "intel-openmp", "pytest"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
print("torch.__file__", torch.__file__)
print("torch git", torch.version.git_version, "cuda", torch.version.cuda)
if staged["torch_git_version"] and staged["torch_git_version"] != torch.version.git_version:
    print("WARNING: torch is not CI's build (CI's git version", staged["torch_git_version"] + ")")
print("torch.cuda.is_available()", torch.cuda.is_available())
print("torch cpu capability", torch.backends.cpu.get_cpu_capability())
# What vLLM's CPU platform reads: the kernel library (_C with AVX-512 BF16,
# else _C_AVX512, else _C_AVX2) and the AMX paths (attention, GDN conv).
for probe in ("_is_amx_tile_supported", "_is_amx_fp16_supported", "_is_avx512_supported",
              "_is_avx512_bf16_supported", "_is_vnni_supported", "_is_avx2_supported"):
    fn = getattr(torch.cpu, probe, None)
    print(f"torch.cpu.{probe}", fn() if fn else "n/a")
from vllm.platforms import current_platform

print("vllm platform", type(current_platform).__name__)
assert type(current_platform).__name__.endswith("CpuPlatform"), current_platform
current_platform.import_kernels()
print("vllm kernels", sorted(m for m in sys.modules if m.startswith("vllm._C")))
print("torch.ops._C.silu_and_mul", torch.ops._C.silu_and_mul)   # fails unless they loaded

print("staged from", staged["commit"], "at", staged["staged_at"])
print("cpu-venv: ok")
PY
} > "$report" 2>&1 || true
grep -E "^pip check|^vllm==|^torch|^WARNING|^cpu-venv" "$report" || true
if [[ "$(tail -1 "$report")" != "cpu-venv: ok" ]]; then
  echo "unpack_cpu_tests.sh: the venv does not work; see $report:" >&2
  tail -5 "$report" >&2
  exit 1
fi
