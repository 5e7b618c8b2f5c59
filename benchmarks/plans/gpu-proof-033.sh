# vLLM 0.33.0: every family, speculation, the dead rank, Shift served (issues 36, 42)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2 (x4 adds TP=4, TP=2xSP=2, its Shift).
# Results: benchmarks/results/2026-11-28-2gpu-0.33.0-h200 (resume: `shift` next).
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
    step "dead_rank_$lay" env PYTHONPATH="$site" python3 -m benchmarks.dead_rank "$lay" \
      --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/$lay.json" --gpus "$dead_gpus"
  done
fi
step eq_report python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"

step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
# A B B A as one step: the four rows are one comparison, so a lease ending inside it serves
# all four again on the next (`beside`), rather than pairs of two leases
step sp1 python3 -m benchmarks.run layout tp1_ours_s1 tp1_s1 tp1_s2 tp1_ours_s2 $L --workloads $W
step sp1_lease beside sp1 tp1_ours_s1 $W tp1_s1 tp1_s2 tp1_ours_s2
step report1 reports
if (( gpus >= 2 )); then
  step shift python3 -m benchmarks.run layout shift tp2 dp2 $L --workloads $W2
  step shift_tp2 beside tp2 shift $W2 tp2 dp2
  step report2 reports
fi
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
