# Issue 32 on 2 GPUs (nvidia-h200-x2 / nvidia-h100-x2): the GPU equivalence
# suite (equivalence.py) in the environment `pip install vllm` gives on the
# host's image (unpack.sh: pip check and versions in $res/env.txt), every
# family at TP=1 (reference), TP=2 (the noise bound), SP=2 and Shift (SP=2,
# its full-TP model at TP=2), each at vLLM's defaults.  A family's layouts
# run at once; families one after the other, highest value first.
# ~2-3 min a family.  Report: python3 benchmarks/equivalence.py report DIR/equiv
step fi_version bash -c 'python3 -c "import flashinfer, vllm; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama gpt_oss qwen3_next qwen3_moe gemma3 glm4_moe; do
  step "eq_$fam" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" tp1 tp2 sp2 shift --timeout 600
done
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1; ls ~/.cache/flashinfer 2>&1 | head'
