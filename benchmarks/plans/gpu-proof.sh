# Issue 32 (nvidia-h100-x4 / nvidia-h200-x4, or a 2-GPU kind for the 2-GPU
# rows): the GPU equivalence suite (equivalence.py) in the environment
# `pip install vllm` gives on the host's image (unpack.sh: pip check and
# versions in $res/env.txt), every family at TP=1 (reference), TP=2 and TP=4
# (the noise bound), SP=2, Shift (SP=2), TP=2xSP=2 and its Shift, each at
# vLLM's defaults (Shift's threshold below the batch budget, so that both its
# models run: equivalence.py SCALES).  Resumed from the last results folder
# (its rows are gzipped), a family runs only its missing layouts (lease 3
# added tp1_again to the families it resumed: TP=1 once more, whether rows of
# two leases on one card compare).
# Report (here or on the host):
#   python3 benchmarks/equivalence.py report RES/equiv --md RES/equiv/report.md
#
# A step's minutes are mostly its engines' start-up (compile, graphs: 1-5
# min, on the host's CPUs; each rank ~3.5 GiB of GPU memory within the 2 GiB
# KV budget), so the steps of a group run at once (`&`, then wait), as a
# family's layouts already do, with vLLM's start-up check of free memory
# (gpu_memory_utilization x the card; nothing else reads it under
# kv_cache_memory_bytes) lowered to what one rank takes.  The groups are
# sized for the state after lease 3 (2026-11-26): a family's rows must all
# come from one card (equivalence.py report), so the plain layouts of lease
# 1 (4xH200) and lease 2 (card not recorded) were removed and run again next
# to lease 3's Shift, speculation, image and dead-rank rows (4xH100, kept:
# their steps find their files and skip them).  Lease 3's groups held up to
# 34 ranks at once (12-14 engines, 4-6 min each); these hold 33-41.
# Groups, highest value first, GPU minutes guessed from 4xH100:
# 1. TP=1, TP=2, SP=2, TP=4, TP=2xSP=2 of Llama, GPT-OSS, Qwen3-MoE (~6);
# 2. the same of Qwen3-Next, Gemma 3, GLM-4.5, and Qwen3-Next's SP=2 Shift
#    again (its lease-3 row predates the scheduler's count of steps per
#    mode) (~6);
# 3. the same of Llama 4; beside it speculative decoding under Shift
#    against TP=1 with the same drafter, each drafting for the family's
#    checkpoint made to repeat most of its tokens (equivalence.py
#    REPEATING): n-gram lookup, the target as its own draft model and an
#    EAGLE-3 head (Llama), the MTP layers of the hybrid Qwen3-Next and of
#    GLM-4.5, with plain TP=4 and each drafter (the spread a rate is held to
#    where the target leaves TP=1's greedy path) (~5);
# 4. the dead rank, alone (it reads every GPU's memory): dead_rank.py's
#    SIGKILL of the last worker mid-stream under Shift, then at plain TP on
#    the official wheel (upstream's behaviour) (~6);
# 5. Qwen3 (dense) and Qwen3-VL with images (deepstack), all seven layouts,
#    new in lease 4; lease 3 ran Gemma 3 with images (SigLIP, image tokens
#    attended bidirectionally), Qwen3.5 as published (the multimodal class
#    over its GDN hybrid) and Qwen2.5-VL with images (~6); then the report.
release 0.26.0 || return 0
layouts=(tp1 tp2 sp2 shift)
(( $(nvidia-smi -L | wc -l) >= 4 )) && layouts+=(tp4 tp2sp2 tp2sp2_shift)
shift_layout=shift; (( $(nvidia-smi -L | wc -l) >= 4 )) && shift_layout=tp2sp2_shift
export EQ_GPU_UTIL=0.06

eq() {   # STEP FAMILY LAYOUT...: a family's missing layouts, as one step
  local name=$1 fam=$2; shift 2
  step "$name" env PYTHONPATH="$SITE_OURS" python3 benchmarks/equivalence.py family "$fam" \
    "$CKPT_DIR/$fam" "$res/equiv" "$@" --timeout 900
}

# Issue 33's AMX run (plans/amx-cpu-tests.sh) on this host's CPU, beside the
# GPU steps, when its parts were carried to $CPU_PARTS (stage_cpu_tests.py):
# its pytest ranks take cores 0-3 of 64, the engines here mostly the GPUs.
amx_pid=
if [[ -f ${CPU_PARTS:-/root/ghc}/bundle.sha256 ]]; then
  (source benchmarks/plans/amx-cpu-tests.sh) &
  amx_pid=$!
fi
group_wait() {   # the steps started with `&` above, not the AMX run
  local p
  for p in $(jobs -p); do [[ $p == "$amx_pid" ]] || wait "$p"; done
}

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
for fam in llama gpt_oss qwen3_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
group_wait
for fam in qwen3_next gemma3 glm4_moe; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
group_wait
eq eq_llama4 llama4 "${layouts[@]}" &
# +draft32: the draft model in float32, whose rate names the cause where bf16's misses
eq eq_llama_spec llama tp1+ngram "$shift_layout+ngram" tp1+draft "$shift_layout+draft" \
  tp1+eagle3 "$shift_layout+eagle3" tp4+ngram tp4+draft tp4+eagle3 \
  tp1+draft32 "$shift_layout+draft32" &
for fam in qwen3_next glm4_moe; do eq "eq_${fam}_mtp" "$fam" tp1+mtp "$shift_layout+mtp" tp4+mtp & done
group_wait
for lay in shift tp; do   # once per results folder
  site=$SITE_OURS; [[ $lay == tp ]] && site=$SITE_OFFICIAL
  [[ -f "$res/dead_rank/$lay.json" ]] || step "dead_rank_$lay" env PYTHONPATH="$site" \
    python3 benchmarks/dead_rank.py "$lay" --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/$lay.json"
done
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
for fam in qwen3 qwen3_vl gemma3_vl qwen3_5 qwen2_5_vl; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
group_wait
step eq_report python3 benchmarks/equivalence.py report "$res/equiv" --md "$res/equiv/report.md"
[[ -n $amx_pid ]] && wait "$amx_pid"
