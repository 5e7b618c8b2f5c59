# Issue 32 (nvidia-h100-x4 / nvidia-h200-x4, or a 2-GPU kind for the 2-GPU
# rows): the GPU equivalence suite (equivalence.py) in the environment
# `pip install vllm` gives on the host's image (unpack.sh: pip check and
# versions in $res/env.txt), every family at TP=1 (reference), TP=2 and TP=4
# (the noise bound), SP=2, Shift (SP=2), TP=2xSP=2 and its Shift, each at
# vLLM's defaults.  A family's layouts run at once; families one after the
# other, highest value first.  Report (here or on the host):
#   python3 benchmarks/equivalence.py report RES/equiv --md RES/equiv/report.md
layouts=(tp1 tp2 sp2 shift)
(( $(nvidia-smi -L | wc -l) >= 4 )) && layouts+=(tp4 tp2sp2 tp2sp2_shift)
step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama gpt_oss qwen3_next qwen3_moe gemma3 glm4_moe llama4; do
  step "eq_$fam" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" "${layouts[@]}" --timeout 600
done
# Speculative decoding with graphs, under Shift at the largest layout lent,
# against TP=1 with the same drafter (n-gram; the target as its own draft model).
shift_layout=shift; (( $(nvidia-smi -L | wc -l) >= 4 )) && shift_layout=tp2sp2_shift
step eq_llama_spec env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family llama \
  "$CKPT_DIR/llama" "$res/equiv" tp1+ngram "$shift_layout+ngram" tp1+draft "$shift_layout+draft" \
  --timeout 600
step eq_report python3 benchmarks/equivalence.py report "$res/equiv" --md "$res/equiv/report.md"
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
