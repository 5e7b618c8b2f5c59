# Every family, layout and capability with all of a layout's ranks on one GPU (issue 83)?
# Kind: nvidia-h200 / nvidia-h100-x1 (one GPU; more GPUs are not used).
# Results: benchmarks/results/<date>-1gpu-shared-ranks-<release>-<card> (resume from its folder).
# The ranks share the card and talk over NCCL's socket transport on loopback
# (harness.shared_gpu): kernels and the runner are checked, NVLink and
# speed are not; no timing here is a speed figure.  Any release: PLAN_RELEASE (0.33.0 by
# default; stage.py --vllm-version the same).
release "${PLAN_RELEASE:-0.33.0}" || return 0
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
eq_args=--shared-gpu
# PLAN_FAMILIES="llama qwen3": only those families' steps (a short lease, or a release
# without the MLA, EP and Mamba-2 families: 0.26.0).
wanted() { [[ -z ${PLAN_FAMILIES:-} || " $PLAN_FAMILIES " == *" $1 "* ]]; }
shared() {
  wanted "$2" || return 0
  eq "$@"
}
eq_timeout=1500
export EQ_GPU_UTIL=0.02          # each rank's start-up check only: the KV cache is sized
export EQ_KV_BYTES=$((1 << 30))  # a rank: ~65k tokens of the 8B shape, more than the prompts need
# Fewer graphs (13 sizes, 1-1024, where vLLM's default has 83), still FULL_AND_PIECEWISE:
# a lease's minutes go to families rather than captures.  0.33.0's rows before Qwen3 and
# every MTP row capture the default list (each row records its sizes).
export EQ_CAPTURE_SIZES=1,2,4,8,16,24,32,64,128,256,512,768,1024
dense=(tp1 tp2 tp4 sp2 shift tp2sp2_shift)
# DeepSeek-V3's engines two at a time on an 80 GiB card (four at once, ~54 GiB of weights
# in seven ranks, ran out of memory at start on an H100), all four on a larger one.
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
ds_jobs=$(( ${gpu_mib:-0} > 100000 ? 4 : 2 ))

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1; pip check'
# Which collectives work between processes on one GPU, and whether a CUDA graph holds them
# (gloo left out: it failed or hung on both releases' leases, 90 s of each lease); once a
# results folder: a lease that resumes one has its table.
[[ -f $res/probe.json ]] || step probe python3 -m benchmarks.shared_gpu_probe --worlds 2,4 --json "$res/probe.json" \
  --md "$res/probe.md" --modes nccl,nccl-hostid,nccl-multirank
# The first family shows whether the mode works at all; then the capabilities never run on
# a GPU before, the cheapest first (Mamba-2, EP at TP x SP, then MLA); then every other family.
eq_timeout=600 shared eq_llama llama "${dense[@]}"     # a hang here says the mode does not work
shared eq_nemotron_h nemotron_h "${dense[@]}"
shared eq_granite_h granite_h "${dense[@]}" tp2_ep shift_ep
shared eq_qwen3_moe_a3b qwen3_moe_a3b tp1 tp2_ep tp4_ep tp2sp2_ep tp2sp2_shift_ep
# DeepSeek-V3's reduced shape holds ~11 GiB of weights a TP=1 engine (every SP rank holds
# its TP shard whole): its layouts in three groups.
EQ_JOBS=$ds_jobs shared eq_deepseek_v3 deepseek_v3 tp1 tp2 sp2 shift
EQ_JOBS=$ds_jobs shared eq_deepseek_v3_ep deepseek_v3 tp2_ep sp2_ep shift_ep tp4
EQ_CAPTURE_SIZES= EQ_JOBS=$ds_jobs shared eq_deepseek_v3_mtp deepseek_v3 tp2sp2_shift tp1+mtp shift_ep+mtp \
  tp2_ep+mtp
# FP8 KV cache under SP: llama_fp8kv's (per-head scales) and llama_kvfp8's (no scales) SP and
# Shift rows missed the bound on 0.33.0 (H100) where their TP rows passed, while the kernels
# alone on the exchange's column views (once a folder) computed the same.  llama_kvfp8 on the
# series that quantizes the query before the exchange (attention-fp8-query-before-exchange:
# 0.33.0's rows in equiv/ ran before it) into equiv-fp8q/, layer 0's attention traced on every
# rank of each layout and each rank's heads held against TP=1's (the dumps stay on the host);
# then a checkpoint's per-tensor scales, which SP still refuses: lifted for these rows only
# (harness.shared_gpu).
if wanted llama_kvfp8 && [[ ! -f $res/fp8kv-probe.json ]]; then
  step fp8kv_probe env PYTHONPATH="$SITE_OURS" \
    python3 -m benchmarks.fp8kv_probe --json "$res/fp8kv-probe.json" --md "$res/fp8kv-probe.md"
fi
VLLM_SP_ALLOW_QUANTIZED_KV=1 EQ_TRACE_DIR=$HOME/fp8-trace eq_dir=equiv-fp8q \
  shared eq_kvfp8_q llama_kvfp8 "${dense[@]}"
VLLM_SP_ALLOW_QUANTIZED_KV=1 eq_dir=equiv-fp8q shared eq_fp8kv_tensor llama_fp8kv_tensor \
  "${dense[@]}"
if wanted llama_kvfp8; then
  step fp8q_report python3 -m benchmarks.equivalence report "$res/equiv-fp8q" \
    --md "$res/equiv-fp8q/report.md"
  step fp8_trace python3 -m benchmarks.attn_trace compare "$HOME/fp8-trace" \
    --md "$res/fp8-trace.md" --json "$res/fp8-trace.json"
fi
# What never ran on any GPU (Falcon-H1, Zamba2, ALiBi, Mistral) before the multimodal
# families that ran on several.  llama_fp8kv (per-head KV scales) is out while SP refuses it.
for fam in qwen3 qwen3_moe gpt_oss qwen3_next gemma3 llama4 glm4_moe falcon_h1 zamba2 \
           bloom mistral qwen3_5 qwen3_vl gemma3_vl qwen2_5_vl; do
  shared "eq_$fam" "$fam" "${dense[@]}"
done
step eq_report python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
