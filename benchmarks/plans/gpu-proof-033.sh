# Issues 36 and 42: vLLM 0.33.0 (torch 2.14) GPU-proven in the environment `pip install
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
# otherwise no step runs and $res/env.txt says what failed.  Issue 42, highest value first,
# each step resumable (a RESUME skips what its res.tgz holds):
#   1. equivalence.py, every family of its FAMILIES (12), at TP=1 (reference), TP=2 (the
#      noise bound: 1.5x its distance from TP=1), SP=2 and Shift (SP=2, its threshold below
#      the batch budget so that both models run); on 4 GPUs also TP=4, TP=2xSP=2 and its
#      Shift.  Families three at a time (the last group five; the speculative rows beside the
#      third; the dead rank after every family), as gpu-proof.sh runs them (EQ_GPU_UTIL: each rank's
#      start-up check of free memory lowered to what it takes).
#   2. speculation under Shift against TP=1 with the same drafter, each drafting for the
#      family's repeating checkpoint: n-gram, the target as its own draft model and an
#      EAGLE-3 head (Llama), the MTP layers of Qwen3-Next and GLM-4.5; plain TP=2 with each
#      drafter (TP=4 on 4 GPUs) is the spread a rate is held to where the target leaves
#      TP=1's greedy path (equivalence.py's _spec_row).
#   3. the dead rank (dead_rank.py): SIGKILL of the last worker mid-stream under Shift, then
#      plain TP on the official wheel (upstream's behaviour beside ours).
#   4. served (run.py, Llama-3.1-8B shape, dummy weights): SP=1 of ours against the official
#      0.33.0 wheel, A B B A over four servers so that the spread between servers of one
#      wheel shows (lat8k: TTFT 8k and TPOT at one user; sat: saturation); then Shift, TP=2
#      and DP=2 on lat8k, lat4k, burst1 and sat4k, `beside` keeping ratios on one lease.
# Minutes (2xH100/H200, guessed from the 0.26.0 runs on 4 GPUs): staging 55 calls ~6, installs
# ~3 (3.1 GiB of wheels; torch 2.14 and its CUDA wheels replace the image's), FlashInfer's JIT
# of the fused all-reduce ~3 once per host (session.sh returns its cache: carry it next
# lease); each group of three families 5-7, the speculation group ~5, the dead rank ~6; the
# SP=1 servers ~3 each, Shift ~4.5, TP=2 ~3.5, DP=2 ~3.5 with their workloads.  So steps 1-3
# take one lease (~30 min, the last group possibly resumed on the next), step 4 one or two
# more (staged again, RESUME from the last res.tgz).
release 0.33.0 || return 0
gpus=${PLAN_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
S=${PLAN_SHAPE:-8b}
L="--shape $S"
W=lat8k,sat                                # TTFT 8k, TPOT at one user; saturation
W2=lat8k,lat4k,burst1,sat4k                # Shift against TP=2 and DP=2 (issue 42, item 4)
[[ $S == tiny ]] && W=lat8k W2=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
layouts=(tp1)
(( gpus >= 2 )) && layouts+=(tp2 sp2 shift)
(( gpus >= 4 )) && layouts+=(tp4 tp2sp2 tp2sp2_shift)
shift_layout=shift; plain=tp2
(( gpus >= 4 )) && shift_layout=tp2sp2_shift plain=tp4
(( gpus < 2 )) && note "== $gpus GPU: TP=1 rows and the SP=1 comparison only"
export EQ_GPU_UTIL=0.06
dead_gpus=2; (( gpus >= 4 )) && dead_gpus=4

eq() {   # STEP FAMILY LAYOUT...: a family's missing layouts, as one step
  local name=$1 fam=$2; shift 2
  step "$name" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" "$@" --timeout 900
}

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama gpt_oss qwen3_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
for fam in qwen3_next gemma3 glm4_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
if (( gpus >= 2 )); then
  eq eq_llama4 llama4 "${layouts[@]}" &
  # +draft32: the draft model in float32, whose rate names the cause where bf16's misses
  eq eq_llama_spec llama tp1+ngram "$shift_layout+ngram" tp1+draft "$shift_layout+draft" \
    tp1+eagle3 "$shift_layout+eagle3" "$plain+ngram" "$plain+draft" "$plain+eagle3" \
    tp1+draft32 "$shift_layout+draft32" &
  for fam in qwen3_next glm4_moe; do
    eq "eq_${fam}_mtp" "$fam" tp1+mtp "$shift_layout+mtp" "$plain+mtp" &
  done
  wait
else
  eq eq_llama4 llama4 "${layouts[@]}"
fi
for fam in qwen3 qwen3_vl gemma3_vl qwen3_5 qwen2_5_vl; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
if (( gpus >= 2 )); then
  for lay in shift tp; do   # alone: it reads every GPU's memory
    site=$SITE_OURS; [[ $lay == tp ]] && site=$SITE_OFFICIAL
    step "dead_rank_$lay" env PYTHONPATH="$site" python3 benchmarks/dead_rank.py "$lay" \
      --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/$lay.json" --gpus "$dead_gpus"
  done
fi
step eq_report python3 benchmarks/equivalence.py report "$res/equiv" --md "$res/equiv/report.md"

step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup $L
# A B B A as one step: the four rows are one comparison, so a lease ending inside it serves
# all four again on the next (`beside`), rather than pairs of two leases
step sp1 python3 benchmarks/run.py layout tp1_ours_s1 tp1_s1 tp1_s2 tp1_ours_s2 $L --workloads $W
step sp1_lease beside sp1 tp1_ours_s1 $W tp1_s1 tp1_s2 tp1_ours_s2
step report1 reports
if (( gpus >= 2 )); then
  step shift python3 benchmarks/run.py layout shift tp2 dp2 $L --workloads $W2
  step shift_tp2 beside tp2 shift $W2 tp2 dp2
  step report2 reports
fi
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
