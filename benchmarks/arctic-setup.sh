#!/usr/bin/env bash
# On the GPU host, after host-setup.sh: ArcticInference 0.3.0 (the peer we are
# measured against) as a plugin of the *official* vLLM 0.26.0 install.
#   bash benchmarks/arctic-setup.sh SDIST [SITE]      SITE defaults to $SITE_ARCTIC (hostpaths.sh)
# -> SITE: the arctic_inference package, its compiled suffix-decoding module and
#    a dist-info whose entry point vLLM's plugin loader finds; run a server with
#    PYTHONPATH=SITE:$SITE_OFFICIAL ARCTIC_INFERENCE_ENABLED=1 (run.py's "arctic" install).
# -> $BENCH_DIR/res/arctic-env.txt (ARCTIC_REPORT overrides): the sdist's hash, the build's
#    tools, the vLLM the plugin sees (checked: the official install, never $SITE_OURS, at the
#    version its patches require), its `vllm-26` extra's pin against that, and `pip check`
#    of the environment the peer's servers run in.
# SITE_BASE (a test off the host): import vLLM from there instead of $SITE_OFFICIAL, and
# skip the `vllm serve` check.
#
# Why not `pip install SDIST`: the host has no network, and the sdist's build
# backend wants protobuf/grpcio-tools to generate a gRPC client for its
# embedding server, which the vLLM plugin never imports.  What the plugin needs
# is the Python package plus one nanobind module (csrc/suffix_decoding, imported
# by its model runner), built here the way its setup.py builds it: CMake + Ninja
# against this Python and the host's nanobind.  Nothing of Arctic is changed.
# Its CUDA custom ops (csrc/custom_ops, built only with ARCTIC_INFERENCE_PRECOMPILED_OPS)
# serve SwiftKV and its speculator, which no row here uses.
set -euo pipefail
# shellcheck source=hostpaths.sh
source "$(dirname "${BASH_SOURCE[0]}")/hostpaths.sh"
sdist=$1
site=${2:-$SITE_ARCTIC}
py=${PYTHON:-python3}
base=${SITE_BASE:-$SITE_OFFICIAL}
report=${ARCTIC_REPORT:-$BENCH_DIR/res/arctic-env.txt}
mkdir -p "$(dirname "$report")"
work=$(mktemp -d)
tar -xzf "$sdist" -C "$work"
src=$(echo "$work"/arctic_inference-*)
version=${src##*-}
rm -rf "$site"
mkdir -p "$site"
cp -r "$src/arctic_inference" "$site/"
cmake -S "$src/csrc/suffix_decoding" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v "$py")" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$site/arctic_inference/suffix_decoding" > "$work/cmake.log"
cmake --build "$work/build" >> "$work/cmake.log"
dist="$site/arctic_inference-$version.dist-info"
mkdir -p "$dist"
# Its own requirements (each behind an extra) from the sdist's PKG-INFO, so that `pip check`
# and the extra's check below read what `pip install arctic_inference[...]` would.
{
  printf 'Metadata-Version: 2.1\nName: arctic_inference\nVersion: %s\n' "$version"
  grep -E '^(Requires-Dist|Provides-Extra): ' "$src/PKG-INFO" || true
} > "$dist/METADATA"
printf 'arctic-setup.sh\n' > "$dist/INSTALLER"
cp "$src/arctic_inference.egg-info/entry_points.txt" "$dist/entry_points.txt"
{
  echo "== ArcticInference $version, built by benchmarks/arctic-setup.sh into $site"
  echo "sdist $(basename "$sdist") sha256 $(sha256sum "$sdist" | cut -d' ' -f1)"
  echo "built with $("$py" -V 2>&1), $(cmake --version | head -1), nanobind" \
    "$("$py" -m nanobind --version 2>/dev/null || echo '?') (its build-system pins 2.9.2)," \
    "ninja $(ninja --version 2>/dev/null || echo '?'); csrc/suffix_decoding only"
} > "$report"
rm -rf "$work"
# The plugin, its compiled module, and the vLLM it would patch: the official install at the
# version its patches target, never our patched copy.
PYTHONPATH="$site:$base" "$py" - "$SITE_OURS" <<'EOF' | tee -a "$report"
import os
import sys
from importlib.metadata import entry_points, requires, version

import vllm
from packaging.requirements import Requirement

from arctic_inference.suffix_decoding import SuffixDecodingCache  # noqa: F401 (it loads)
from arctic_inference.utils import get_compatible_vllm_version

names = [e.name for e in entry_points(group="vllm.general_plugins")]
assert "arctic_inference" in names, names
print("arctic_inference", version("arctic_inference"), "plugin entry point found")
where = os.path.realpath(vllm.__file__)
print("the vllm it patches:", vllm.__version__, where)
ours = os.path.realpath(sys.argv[1]) + os.sep
assert not where.startswith(ours), f"the peer would run our patched vllm ({where})"
want = get_compatible_vllm_version()
assert vllm.__version__ == want, f"its patches need vllm=={want}, found {vllm.__version__}"
print(f"vllm {vllm.__version__}: the version its patches require ({want})")
for line in requires("arctic_inference") or []:      # what `pip install ...[vllm-26]` pins
    req = Requirement(line)
    if req.marker and req.marker.evaluate({"extra": "vllm-26"}) \
            and not req.marker.evaluate({"extra": ""}):
        have = version(req.name)
        ok = req.specifier.contains(have, prereleases=True)
        print(f"arctic_inference[vllm-26] requires {req.name}{req.specifier}: {have}",
              "ok" if ok else "NOT satisfied")
        assert ok, line
EOF
{
  echo "== pip check (PYTHONPATH=$site:$base: the environment the peer's servers run in)"
  PYTHONPATH="$site:$base" "$py" -m pip check 2>&1 && echo "pip check: clean" \
    || echo "pip check: NOT clean"
} >> "$report"
grep "^pip check:" "$report" | sed 's/^/arctic_inference: /'
# The plugin must load into the official vLLM and add its flags to `vllm serve`.
if [[ -z ${SITE_BASE:-} ]]; then
  help=$(ARCTIC_INFERENCE_ENABLED=1 PYTHONPATH="$site:$SITE_OFFICIAL" "$py" -m vllm.entrypoints.cli.main \
           serve --help=all 2>&1 || true)
  if ! grep -q -- --ulysses-sequence-parallel-size <<< "$help"; then
    echo "arctic-setup.sh: the plugin did not add its flags to vllm serve:" >&2
    tail -20 <<< "$help" >&2
    exit 1
  fi
  echo "arctic_inference: vllm serve takes --ulysses-sequence-parallel-size" | tee -a "$report"
fi
