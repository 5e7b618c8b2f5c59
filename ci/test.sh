#!/usr/bin/env bash
# The test command (README, .ci/run): build the CPU wheel from a clean tree,
# install it into a venv with its dependencies, run the whole suite on the
# real vLLM CPU engine.  Also builds the CUDA wheel, whose contents the build
# tests check (it is not run here: no GPU).
#   ci/test.sh [pytest args...]        venv: $TEST_VENV (default .venv-cpu)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${TEST_VENV:-.venv-cpu}

./build.sh --device cuda
./build.sh --device cpu --install "$venv"
"$venv/bin/python" -m pip install -q -r tests/requirements.txt

set +e
"$venv/bin/python" -m pytest tests -v -rA --durations=15 "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "ci/test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit $rc
