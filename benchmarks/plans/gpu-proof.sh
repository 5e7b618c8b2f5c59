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
# Issue 32's rows that no lease has reached yet, highest value first (each a
# step, skipped once done; a family resumed from a results folder skips its
# gzipped layouts): Qwen3.5 as published (the multimodal class over its GDN
# hybrid, image prompts included), Qwen2.5-VL with images, then speculative
# decoding with drafters that `equivalence.py ckpt` writes beside the target
# (an EAGLE-3 head for Llama; the MTP layers of the hybrid Qwen3-Next and of
# GLM-4.5; each drafting for the family's checkpoint made to repeat most of
# its tokens, so that acceptance means something) under Shift against TP=1
# with the same drafter, then the dead rank (dead_rank.py: SIGKILL of the last
# worker mid-stream; the requests' errors within 60 s, the server's exit, no
# GPU memory left) under Shift and at plain TP, the latter on the official
# wheel (upstream's behaviour), then Gemma 3 with images (SigLIP, image tokens
# attended bidirectionally), then the report.  GPU minutes, guessed from the
# first lease's families (3-6 min each): Qwen3.5 ~5, Qwen2.5-VL ~4, each
# speculative pair ~3-5 (its checkpoints' writing ~1), the dead rank ~3 per
# layout, Gemma 3 ~4.
for fam in qwen3_5 qwen2_5_vl; do
  step "eq_$fam" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" "${layouts[@]}" --timeout 900
done
step eq_llama_eagle3 env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family llama \
  "$CKPT_DIR/llama" "$res/equiv" tp1+eagle3 "$shift_layout+eagle3" --timeout 900
for fam in qwen3_next glm4_moe; do
  step "eq_${fam}_mtp" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family \
    "$fam" "$CKPT_DIR/$fam" "$res/equiv" tp1+mtp "$shift_layout+mtp" --timeout 900
done
step dead_rank_shift env PYTHONPATH="$SITE_OURS" python3 benchmarks/dead_rank.py shift \
  --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/shift.json"
step dead_rank_tp env PYTHONPATH="$SITE_OFFICIAL" python3 benchmarks/dead_rank.py tp \
  --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/tp.json"
step eq_gemma3_vl env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family gemma3_vl \
  "$CKPT_DIR/gemma3_vl" "$res/equiv" "${layouts[@]}" --timeout 900
step eq_report_all python3 benchmarks/equivalence.py report "$res/equiv" --md "$res/equiv/report.md"
