# Issue 36, item 2: vLLM 0.33.0 (torch 2.14) GPU-proven in the environment `pip install
# vllm==0.33.0` gives on the host's image.  A plan for benchmarks/session.sh, kind
# nvidia-h200-x2 or nvidia-h100-x2 (4 GPUs add the TP=2xSP=2 Shift row), staged with
#   ./build.sh --device cuda --version 0.33.0 && python3 benchmarks/stage.py --vllm-version 0.33.0
# (.gpuhost-0.33.0/; the device calls: benchmarks/README.md, "Staging").  Then:
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/gpu-proof-033.sh /root/gh \
#      [RESUME] > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# What it would run, on any machine:
#   BENCH_DIR=/tmp/bd PLAN_GPUS=2 bash benchmarks/session.sh dry benchmarks/plans/gpu-proof-033.sh
#
# Before any step here, session.sh's installs ran unpack.sh, whose smoke check (torch 2.14
# imports with vLLM's compiled ops, a CUDA matmul, an NCCL all-reduce over 2 GPUs) must pass:
# otherwise no step runs and $res/env.txt says what failed.  Highest value first, each step
# resumable (a RESUME skips what its res.tgz holds):
#   1. equivalence.py's core rows (the gpu-proof.sh suite, same criterion): Llama, Qwen3-MoE,
#      GPT-OSS, Qwen3-Next at TP=1 (reference), TP=2 (the noise bound), SP=2, Shift
#      (+ TP=2xSP=2 Shift on 4 GPUs); one speculative method under Shift: the draft model
#      (the target as its own drafter), CUDA graphs on, against TP=1 with the same drafter
#      (and plain TP=2 with it: the spread a rate is held to where the target leaves TP=1's
#      greedy path, equivalence.py's _spec_row).
#   2. served (run.py, Llama-3.1-8B shape, dummy weights): SP=1 of ours against the official
#      0.33.0 wheel, A B B A over four servers so the spread between servers of one wheel
#      shows (TTFT at 8k and TPOT at one user: lat8k; saturation: sat); then Shift against TP=2.
# Minutes (2xH200, estimated from the 0.26.0 runs): staging 55 calls ~6, installs ~3 (3.1 GiB
# of wheels; torch 2.14 and its CUDA wheels replace the image's; smoke ~0.5); a family's
# layouts at once 2-5 (FlashInfer's JIT of the fused all-reduce ~3 once per host); the draft
# rows ~4; the SP=1 servers ~3 each; Shift ~4.5, TP=2 ~3.5.  So one 30-minute lease holds
# step 1 (~18 min); step 2 (~20 min) resumes on a second lease (staged again, RESUME from
# the first lease's res.tgz).
want=0.33.0
gpus=${PLAN_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
S=${PLAN_SHAPE:-8b}
L="--shape $S"
W=lat8k,sat                                # TTFT 8k, TPOT at one user; saturation
[[ $S == tiny ]] && W=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
got=$(python3 -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)
if [[ ${BENCH_DRY_RUN:-} != 1 && $got != "$want" ]]; then
  note "!! gpu-proof-033.sh: the install is vLLM ${got:-(none)}, not $want: stage it with" \
    "stage.py --vllm-version $want"
  return 0
fi
layouts=(tp1)
(( gpus >= 2 )) && layouts+=(tp2 sp2 shift)
(( gpus >= 4 )) && layouts+=(tp2sp2_shift)
shift_layout="shift"; (( gpus >= 4 )) && shift_layout=tp2sp2_shift
(( gpus < 2 )) && note "== $gpus GPU: TP=1 rows and the SP=1 comparison only"

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama qwen3_moe gpt_oss qwen3_next; do
  step "eq_$fam" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" "${layouts[@]}" --timeout 600
done
if (( gpus >= 2 )); then
  step eq_llama_spec env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family llama \
    "$CKPT_DIR/llama" "$res/equiv" tp1+draft tp2+draft "$shift_layout+draft" --timeout 600
fi
step eq_report python3 benchmarks/equivalence.py report "$res/equiv" --md "$res/equiv/report.md"

step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup $L
step sp1_a python3 benchmarks/run.py layout tp1_ours_s1 tp1_s1 $L --workloads $W
step sp1_a_lease beside sp1a tp1_ours_s1 $W tp1_s1
step sp1_b python3 benchmarks/run.py layout tp1_s2 tp1_ours_s2 $L --workloads $W
step sp1_b_lease beside sp1b tp1_s2 $W tp1_ours_s2
step report1 reports
if (( gpus >= 2 )); then
  step shift python3 benchmarks/run.py layout shift tp2 $L --workloads $W
  step shift_tp2 beside tp2 shift $W tp2
  step report2 reports
fi
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
