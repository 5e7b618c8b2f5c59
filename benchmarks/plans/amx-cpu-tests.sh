# Issue 33's "the hybrid tests pass on an AMX host" (kind nvidia-h100-x1: only its CPU is
# used, CUDA_VISIBLE_DEVICES empty): the CPU engine's bf16 Gated-DeltaNet hybrid tests on
# the GPU host's Xeon, in a Python 3.12 venv of our CPU wheel at CI's versions
# (benchmarks/stage_cpu_tests.py; parts in CPU_PARTS, default /root/ghc).
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/plans/amx-cpu-tests.sh /root/ghc \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
#   next calls: cd /root/work && bash benchmarks/session.sh wait 500   (returns $OUT/res.tgz)
# Run as a file it is its own runner (session.sh's `step`, results in $BENCH_DIR/res, no GPU
# install: session.sh's `run` would install the GPU bundle first); sourced by session.sh it
# runs after a GPU plan's installs, the CPU parts then in $CPU_PARTS.
# 1. amx_cpu: lscpu, the AMX and AVX-512 flags (amx.txt says whether this host can show
#    the fault at all).
# 2. amx_venv: unpack_cpu_tests.sh: the venv, pip check, torch's and vLLM's view of the ISA
#    (amx/env.txt: torch.cpu._is_amx_tile_supported decides vLLM's AMX paths).
# 3. amx_repro_tp4: docs/reliability.md's reproduction as written (TP=4 vs TP=1).
# 4. the tests, one pytest each (junit XML in amx/): the pin itself and the gloo units
#    (test_cpu_path.py: this host's workers take the AVX2 path; test_ulysses_unit.py,
#    test_ulysses_gdn.py), test_e2e_hybrid.py whole, test_e2e_families.py -k qwen3_5,
#    test_e2e_spec.py -k hybrid, test_e2e_families.py -k gpt_oss (the bf16 tests).
# 5. amx_repro_layouts: amx_repro.py, TP=1/2/4, SP=2, TP=2xSP=2 against TP=1 and TP=4 (JSON).
# Threads: the harness binds rank r's OpenMP threads to core r % cores (cpu_env), one core
# a rank as on CI; the steps run one after the other, so no two engines share a core.
cpu_parts=${CPU_PARTS:-/root/ghc}
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  cpu_parts=${1:-$cpu_parts}
  here=$(cd "$(dirname "$0")/../.." && pwd)
  cd "$here" || exit 1
  # shellcheck source=benchmarks/hostpaths.sh
  source benchmarks/hostpaths.sh
  res=$BENCH_DIR/res
  mkdir -p "$res"
  export PYTHONUNBUFFERED=1
  step() {      # session.sh's
    local name=$1; shift
    [[ -f "$res/done.$name" ]] && return 0
    echo "== $name $(date +%T)" >> "$res/progress.log"
    if "$@" >> "$res/progress.log" 2>&1; then
      touch "$res/done.$name"; echo "== $name ok $(date +%T)" >> "$res/progress.log"
    else
      echo "!! $name failed $(date +%T)" >> "$res/progress.log"
    fi
  }
  amx_standalone=1
fi
amx=$res/amx
mkdir -p "$amx"
cpu_dest=${CPU_DEST:-/root/cpu-tests}
vpy=$cpu_dest/venv/bin/python
tests=$cpu_dest/bundle/repo/tests
models=$cpu_dest/models          # the tiny checkpoints, made once, shared by the steps
cpu=(env -C "$tests" CUDA_VISIBLE_DEVICES= SP_TEST_MODELS="$models" timeout 1500 "$vpy")
pytest=("${cpu[@]}" -m pytest -v -rfEs --durations=20 -p no:cacheprovider)

step amx_cpu bash -c "lscpu | tee '$amx/lscpu.txt'; echo; nproc; free -g
  flags=\$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512)' | tr '\n' ' ')
  { grep -m1 'model name' /proc/cpuinfo; echo \"flags: \$flags\"
    if [[ \$flags == *amx_tile* ]]; then echo 'AMX: yes'; else echo 'AMX: NO'; fi; } | tee '$amx/amx.txt'"
step amx_venv bash benchmarks/unpack_cpu_tests.sh "$cpu_parts" "$cpu_dest" "$amx/env.txt"
step amx_repro_tp4 "${cpu[@]}" -c "from pathlib import Path; from harness.models import GDN, make_qwen3_next; \
from harness.workload import run; from harness.compare import agreeing; \
m = make_qwen3_next(Path('/tmp/hybrid')); a = run(m, **GDN); b = run(m, tp=4, **GDN); \
print(a.tokens == b.tokens, agreeing(a, b))"
step amx_pin "${pytest[@]}" test_cpu_path.py test_ulysses_unit.py test_ulysses_gdn.py \
  --junitxml="$amx/pin_units.xml"
step amx_hybrid "${pytest[@]}" test_e2e_hybrid.py --junitxml="$amx/hybrid.xml"
step amx_qwen3_5 "${pytest[@]}" test_e2e_families.py -k qwen3_5 --junitxml="$amx/qwen3_5.xml"
step amx_spec_hybrid "${pytest[@]}" test_e2e_spec.py -k hybrid --junitxml="$amx/spec_hybrid.xml"
step amx_gpt_oss "${pytest[@]}" test_e2e_families.py -k gpt_oss --junitxml="$amx/gpt_oss.xml"
step amx_repro_layouts "${cpu[@]}" "$here/benchmarks/amx_repro.py" "$amx/repro.json" \
  --tests "$tests" --models "$models/repro"
if [[ -n ${amx_standalone:-} ]]; then
  echo "== all steps tried $(date +%T)" >> "$res/progress.log"
fi
