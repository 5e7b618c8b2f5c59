# Engine-level equivalence and prefill time of SP against TP (a plan for
# benchmarks/session.sh; kind nvidia-h200-x2, or nvidia-h200-x4 for the 4-GPU
# layouts): benchmarks/sp_gpu.py on a seeded random Llama-3.1-8B-shaped
# checkpoint that every layout loads (vLLM's dummy loader would give each TP
# rank different weights), one engine per layout in its own process, then the
# tables (teacher-forced top-1 agreement, max logprob difference, prefill of
# one 8k and one 32k prompt, median of 3).
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-equivalence.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# Every layout runs our wheel ($SITE_OURS); results in $res/equiv/ (one JSON per
# layout, its engine log, report.md).  What it measured:
# benchmarks/results/2026-11-22-2gpu-sp-equivalence-prefill/ and
# benchmarks/results/2026-11-22-4gpu-sp-equivalence-prefill/.
release 0.26.0 || return 0
mkdir -p "$res/equiv"
equiv_engine() {   # equiv_engine TAG [NAME=VALUE...] ENGINE-ARGS...: one layout, its log beside its JSON
  local tag=$1 envs=(); shift
  while [[ ${1:-} == *=* ]]; do envs+=("$1"); shift; done
  env PYTHONPATH="$SITE_OURS" "${envs[@]}" python3 benchmarks/sp_gpu.py engine "$CKPT_DIR" "$@" \
    --out "$res/equiv/$tag.json" > "$res/equiv/$tag.log" 2>&1 || { tail -60 "$res/equiv/$tag.log"; return 1; }
  grep -E "@@done|V2|cudagraph|Capturing|compil|Ulysses|ERROR" "$res/equiv/$tag.log" | cut -c1-300 | tail -25
}
step ckpt bash -c "[[ -f $CKPT_DIR/layer031.safetensors ]] ||
  PYTHONPATH=$SITE_OURS python3 benchmarks/sp_gpu.py ckpt $CKPT_DIR; du -sh $CKPT_DIR"
if (( $(nvidia-smi -L | wc -l) >= 4 )); then
  step equiv_tp2_sp2 equiv_engine tp2_sp2 --tp 2 --sp 2
  step equiv_tp4_sp1 equiv_engine tp4_sp1 --tp 4 --sp 1
  step equiv_tp1_sp4 equiv_engine tp1_sp4 --tp 1 --sp 4
  step equiv_tp1_sp1 equiv_engine tp1_sp1 --tp 1 --sp 1
else
  step equiv_tp1_sp2 equiv_engine tp1_sp2 --tp 1 --sp 2
  step equiv_tp1_sp1 equiv_engine tp1_sp1 --tp 1 --sp 1
  step equiv_tp2_sp1 equiv_engine tp2_sp1 --tp 2 --sp 1
  # two extra SP=2 runs, checks only (no timings): the V1 model runner, and eager
  step equiv_v1 equiv_engine tp1_sp2_v1 QUICK=1 "LAYOUT_SUFFIX= V1-runner" VLLM_USE_V2_MODEL_RUNNER=0 \
    --tp 1 --sp 2
  step equiv_eager equiv_engine tp1_sp2_eager QUICK=1 "LAYOUT_SUFFIX= eager" --tp 1 --sp 2 --eager
fi
step equiv_report bash -c "PYTHONPATH=$SITE_OURS python3 benchmarks/sp_gpu.py report $res/equiv/*.json \
  > $res/equiv/report.md"
