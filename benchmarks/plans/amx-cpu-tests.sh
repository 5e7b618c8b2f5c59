# Do the bf16 hybrid tests pass on the GPU host's AMX Xeon (issue 33)?
# Kind: nvidia-h200, its CPU only (also sourced by gpu-proof.sh).
# Results: benchmarks/results/2026-11-29-1gpu-host-amx-cpu.
cpu_parts=${CPU_PARTS:-/root/ghc}      # session.sh cpu PLAN PARTS sets it
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
step amx_repro_layouts env -C "$tests" PYTHONPATH="$here" CUDA_VISIBLE_DEVICES= \
  SP_TEST_MODELS="$models" timeout 1500 "$vpy" -m benchmarks.amx_repro "$amx/repro.json" \
  --models "$models/repro"
