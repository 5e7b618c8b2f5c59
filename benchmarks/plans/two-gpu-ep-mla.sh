# Two GPUs on the newest release: every family, EP, MLA and Mamba-2 over NVLink with CUDA
# graphs, and Shift served against TP=2 and DP=2 (issues 72, 86)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2 (nvidia-h200: the TP=1 rows and the shapes only).
# Results: benchmarks/results/<date>-2gpu-<release>-<card> (none yet).  Any ported release:
# PLAN_RELEASE (the default release, VLLM_VERSION, unless set; stage.py --vllm-version the same).
release "${PLAN_RELEASE:-$(< "$here/VLLM_VERSION")}" || return 0
gpus=${PLAN_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
layouts=(tp1)
(( gpus >= 2 )) && layouts+=(tp2 sp2 shift)
ep=(tp1)
(( gpus >= 2 )) && ep+=(tp2 tp2_ep sp2_ep shift_ep)

eq_timeout=1200                  # plan-lib.sh's eq: each layout within 20 min

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1; pip check'
# 1. Equivalence, bf16, graphs and compile on (prompts up to 3000 tokens in chunks of 1024:
# MLA's prompts longer than max_num_batched_tokens; a second round on the prefix cache).
# The MoE and MLA shapes one after the other: DeepSeek-V3's reduced checkpoint is ~8 GiB a
# TP=1 engine, five of them at once on two cards.
export EQ_GPU_UTIL=0.4
eq eq_qwen3_moe_a3b qwen3_moe_a3b "${ep[@]}"
eq eq_deepseek_v3 deepseek_v3 "${ep[@]}"
eq eq_nemotron_h nemotron_h "${layouts[@]}"
eq eq_granite_h granite_h "${layouts[@]}"
if (( gpus >= 2 )); then
  eq eq_deepseek_v3_mtp deepseek_v3 tp1+mtp shift_ep+mtp tp2_ep+mtp
  eq eq_qwen3_moe_a3b_ngram qwen3_moe_a3b tp1+ngram shift_ep+ngram tp2_ep+ngram
  eq eq_llama_spec llama tp1+ngram shift+ngram tp1+eagle3 shift+eagle3
fi
# Every other family, three at a time (small shapes: the cards hold them together).  The
# FP8 KV cache of one scale (llama_kvfp8), which SP serves from 0.33.0 on; not the per-head
# scales of llama_fp8kv, which it refuses.
export EQ_GPU_UTIL=0.1
fams=(llama qwen3 qwen3_moe gpt_oss qwen3_next gemma3 llama4 glm4_moe qwen3_5 qwen3_vl
      gemma3_vl qwen2_5_vl falcon_h1 zamba2 mistral bloom llama_kvfp8)
for ((i = 0; i < ${#fams[@]}; i += 3)); do
  for fam in "${fams[@]:i:3}"; do eq "eq_$fam" "$fam" "${layouts[@]}" & done
  wait
done
step eq_report python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"

# 2. Memory, 3. served: Qwen3-30B-A3B's whole shape with --load-format dummy.  The start-up
# logs of sp2 (no EP: every GPU holds all experts), sp2_ep and tp2_ep give the weights and
# the KV-cache tokens per GPU of one lease.
S=a3b L="--shape a3b"
W=lat8k,lat32k,sat,burst1        # TTFT 8k/32k and TPOT at one user, saturation, a burst
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
if (( gpus >= 2 )); then
  step memory python3 -m benchmarks.run layout sp2 sp2_ep tp2_ep $L --workloads lat8k
  step served python3 -m benchmarks.run layout shift_ep tp2_ep dp2_ep $L --workloads $W
  step served_lease beside ep tp2_ep $W shift_ep dp2_ep
else
  step tp1 python3 -m benchmarks.run layout tp1 $L --workloads lat8k
fi
step report reports
# 3. Served: Shift (fused full-TP all-reduce) against TP=2 and DP=2 on the 8B shape.
if (( gpus >= 2 )); then
  S=8b L="--shape 8b"
  step model_8b env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
  step served_8b python3 -m benchmarks.run layout shift tp2 dp2 $L --workloads $W
  step served_8b_lease beside shift8b tp2 $W shift dp2
  step report_8b reports
fi
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
