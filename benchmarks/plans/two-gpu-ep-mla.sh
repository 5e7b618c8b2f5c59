# Expert parallelism, MLA and Mamba-2 under SP and Shift on GPUs: equal, smaller, faster (issue 72)?
# Kind: nvidia-h200-x2 (nvidia-h200: the TP=1 rows and the shapes only).
# Results: benchmarks/results/<date>-2gpu-ep-mla-h200 (none yet).
release 0.33.0 || return 0
gpus=${PLAN_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
S=${PLAN_SHAPE:-a3b}
L="--shape $S"
W=lat1k,lat8k,lat32k,sat,burst1            # TTFT 8k/32k, TPOT at one user, saturation, burst
[[ $S == tiny ]] && W=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
layouts=(tp1)
(( gpus >= 2 )) && layouts+=(tp2 tp2_ep sp2_ep shift_ep)

eq_timeout=1200                  # plan-lib.sh's eq: each layout within 20 min

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1'
# The two shapes one after the other: DeepSeek-V3's reduced checkpoint is ~11 GiB a TP=1
# engine, five of them at once on two cards.
export EQ_GPU_UTIL=0.4
eq eq_qwen3_moe_a3b qwen3_moe_a3b "${layouts[@]}"
eq eq_deepseek_v3 deepseek_v3 "${layouts[@]}"
# Nemotron-H (dense: no EP rows): its GPU Mamba-2 kernels are not the CPU engine's.
nemotron=(tp1)
(( gpus >= 2 )) && nemotron+=(tp2 sp2 shift)
eq eq_nemotron_h nemotron_h "${nemotron[@]}"
if (( gpus >= 2 )); then
  eq eq_deepseek_v3_mtp deepseek_v3 tp1+mtp shift_ep+mtp tp2_ep+mtp
  eq eq_qwen3_moe_a3b_ngram qwen3_moe_a3b tp1+ngram shift_ep+ngram tp2_ep+ngram
fi
step eq_report python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"

# Memory and serving: Qwen3-30B-A3B's whole shape with --load-format dummy.  The start-up
# logs of sp2 (no EP: every GPU holds all experts), sp2_ep and tp2_ep give the weights and
# the KV-cache tokens per GPU of one lease.
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
if (( gpus >= 2 )); then
  step memory python3 -m benchmarks.run layout sp2 sp2_ep tp2_ep $L --workloads lat8k
  step served python3 -m benchmarks.run layout shift_ep tp2_ep dp2_ep $L --workloads $W
  step served_lease beside ep tp2_ep $W shift_ep dp2_ep
else
  step tp1 python3 -m benchmarks.run layout tp1 $L --workloads lat8k
fi
step report reports
step fi_cache bash -c 'du -sh ~/.cache/flashinfer ~/.cache/vllm 2>&1'
