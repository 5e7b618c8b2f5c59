# Every family at every layout within upstream's spread on GPUs (issue 32)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4 (x2: the 2-GPU rows).
# Results: benchmarks/results/2026-11-26-4gpu-equivalence (resume from it).
release 0.26.0 || return 0
gpus=${PLAN_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
layouts=(tp1 tp2 sp2 shift)
(( gpus >= 4 )) && layouts+=(tp4 tp2sp2 tp2sp2_shift)
shift_layout=shift; (( gpus >= 4 )) && shift_layout=tp2sp2_shift
export EQ_GPU_UTIL=0.06
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama gpt_oss qwen3_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
for fam in qwen3_next gemma3 glm4_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
eq eq_llama4 llama4 "${layouts[@]}" &
# +draft32: the draft model in float32, whose rate names the cause where bf16's misses
eq eq_llama_spec llama tp1+ngram "$shift_layout+ngram" tp1+draft "$shift_layout+draft" \
  tp1+eagle3 "$shift_layout+eagle3" tp4+ngram tp4+draft tp4+eagle3 \
  tp1+draft32 "$shift_layout+draft32" &
for fam in qwen3_next glm4_moe; do eq "eq_${fam}_mtp" "$fam" tp1+mtp "$shift_layout+mtp" tp4+mtp & done
wait
for lay in shift tp; do   # once per results folder
  site=$SITE_OURS; [[ $lay == tp ]] && site=$SITE_OFFICIAL
  [[ -f "$res/dead_rank/$lay.json" ]] || step "dead_rank_$lay" env PYTHONPATH="$site" \
    python3 -m benchmarks.dead_rank "$lay" --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/$lay.json"
done
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
for fam in qwen3 qwen3_vl gemma3_vl qwen3_5 qwen2_5_vl; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
wait
step eq_report python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"
