#!/usr/bin/env bash
# On the GPU host, after host-setup.sh: ArcticInference 0.3.0 (the peer we are
# measured against) as a plugin of the *official* vLLM 0.26.0 install.
#   bash benchmarks/arctic-setup.sh SDIST [SITE]      SITE defaults to $SITE_ARCTIC (hostpaths.sh)
# -> SITE: the arctic_inference package, its compiled suffix-decoding module and
#    a dist-info whose entry point vLLM's plugin loader finds; run a server with
#    PYTHONPATH=SITE:$SITE_OFFICIAL ARCTIC_INFERENCE_ENABLED=1 (run.py's "arctic" install).
#
# Why not `pip install SDIST`: the host has no network, and the sdist's build
# backend wants protobuf/grpcio-tools to generate a gRPC client for its
# embedding server, which the vLLM plugin never imports.  What the plugin needs
# is the Python package plus one nanobind module (csrc/suffix_decoding, imported
# by its model runner), built here the way its setup.py builds it: CMake + Ninja
# against this Python and the host's nanobind.  Nothing of Arctic is changed.
set -euo pipefail
# shellcheck source=hostpaths.sh
source "$(dirname "${BASH_SOURCE[0]}")/hostpaths.sh"
sdist=$1
site=${2:-$SITE_ARCTIC}
py=${PYTHON:-python3}
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
printf 'Metadata-Version: 2.1\nName: arctic_inference\nVersion: %s\n' "$version" > "$dist/METADATA"
cp "$src/arctic_inference.egg-info/entry_points.txt" "$dist/entry_points.txt"
rm -rf "$work"
PYTHONPATH="$site:${SITE_BASE:-$SITE_OFFICIAL}" "$py" - <<'EOF'
from importlib.metadata import entry_points, version
from arctic_inference.suffix_decoding import SuffixDecodingCache  # the compiled module loads
names = [e.name for e in entry_points(group="vllm.general_plugins")]
assert "arctic_inference" in names, names
print("arctic_inference", version("arctic_inference"), "plugin entry point found")
EOF
# The plugin must load into the official vLLM and add its flags to `vllm serve`.
if [[ -z ${SITE_BASE:-} ]]; then
  help=$(ARCTIC_INFERENCE_ENABLED=1 PYTHONPATH="$site:$SITE_OFFICIAL" "$py" -m vllm.entrypoints.cli.main \
           serve --help=all 2>&1 || true)
  if ! grep -q -- --ulysses-sequence-parallel-size <<< "$help"; then
    echo "arctic-setup.sh: the plugin did not add its flags to vllm serve:" >&2
    tail -20 <<< "$help" >&2
    exit 1
  fi
  echo "arctic_inference: vllm serve takes --ulysses-sequence-parallel-size"
fi
