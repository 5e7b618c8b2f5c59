# Issue 34, 4 GPUs: the Llama-3.1-70B shape in FP8 (`--quantization fp8`: dummy bf16
# weights quantized online) served by Shift at TP=2xSP=2 (<-> TP=4), TP=4, ArcticInference
# 0.3.0's shift at the same layout, DP=2xTP=2 (SP=4 and its Shift: four-gpu-sp4.sh).  A plan
# for benchmarks/session.sh, kind nvidia-h100-x4 or nvidia-h200-x4, staged with
# benchmarks/stage.py --vllm-version 0.26.0 (the Arctic sdist included):
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/four-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# What it would run, on any machine (no GPU; run.py prints its servers and clients):
#   BENCH_DIR=/tmp/bd bash benchmarks/session.sh dry benchmarks/plans/four-gpu.sh [RESUME]
#
# The official wheel serves TP and DP, ours (`$SITE_OURS`) the SP and Shift rows, the peer
# the official wheel with its plugin (`$SITE_ARCTIC`, built by arctic-setup.sh; run.py checks
# each server's install and that the peer's log says its patches applied).  Every row at
# vLLM's and Arctic's defaults (its shift threshold 512, ours 1024), the fused all-reduce on
# with the trtllm workspace (hostpaths.sh: no NVLink multicast on these hosts).
#
# Workloads, cheap and high-value first so a cut lease keeps the most: one user at 8k and
# 32k (TTFT), one user at 4k/250 (TTFT, TPOT), the bursty trace burst1, then 4k/250 at
# saturation (sat4k_500: 500 at once, the paper's 1000-on-8 per GPU).  Results:
# $BENCH_DIR/res/70b/<layout>/<workload>.json, each written as it finishes and stamped with
# its lease; a RESUME skips the rows it holds.
#
# Minutes per row, estimated from the one-H200 70B FP8 run (server 144-184 s; lat4k 90 s at
# TP=1) and the 2-GPU 8B costs, untested at 4 GPUs: server start TP=4 / DP=2xTP=2 ~3, Shift
# and the peer's shift ~4 (two models), + ~3 once per lease for FlashInfer's JIT of the fused
# all-reduce; lat8k ~0.6, lat32k ~0.6, lat4k ~0.7, burst1 ~1, sat4k_500 ~2.5 (5.4 together).
# A 30-minute lease less ~2 min staging, ~2.5 min installs and the JIT holds ~20 min of rows:
#   lease 1: shift 9.5 + tp4 8.5                              (tier 1: Shift vs TP=4)
#   lease 2: arctic_shift 9.5 + shift served again beside it ~8   (tier 2: vs the peer)
#   lease 3: dp 8.5 + shift again beside it ~7                (tier 3: vs DP)
#   tier 4 (SP=4, H200 only): plans/four-gpu-sp4.sh
#   then, if lent: the FP8 KV cache and one Poisson rate near TP=4's knee (tier 5).
# `beside` serves the anchor again only when the two rows came from different leases (the
# host keeps nothing between leases, and the card may differ; run.py stamps each row), into
# its own result set (res/70b-<tag>); with a long lease the tiers share one and it skips.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S"
W=lat8k,lat32k,lat4k,burst1,sat4k_500
WP=lat8k,lat32k,lat4k,sat4k_500           # vs the peer: TTFT, TPOT, saturation
WD=burst1,sat4k_500                       # vs DP: saturation, the bursty trace
WK=lat4k,burst1,sat4k_500                 # the FP8 KV cache
# The CPU dry run (PLAN_SHAPE=tiny: run.py's 2-layer shape on the installed CPU wheel, FP8
# flags dropped, the installs and hw steps fail and are only logged): two short workloads;
# the peer has no CPU plugin, its rows are left out.
[[ $S == tiny ]] && W=lat8k,burst1 WP=lat8k WD=burst1 WK=burst1
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup $L
# tier 1: Shift and TP=4 (TTFT 8k-32k >= 1.3x, TPOT <= 1.05x, saturation >= 1.2x, bursty)
step shift python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $W
step tp4 python3 benchmarks/run.py layout tp4_fp8 $L --workloads $W
step shift_tp4 beside tp4 shift_tp2_sp2_fp8 $W tp4_fp8
step report1 reports
# tier 2: the peer's shift at the same layout (ours at least as good on TTFT, TPOT, saturation)
if [[ $S != tiny ]]; then
  step arctic_shift python3 benchmarks/run.py layout arctic_shift_tp2_sp2_fp8 $L --workloads $W
  step shift_peer beside peer shift_tp2_sp2_fp8 $WP arctic_shift_tp2_sp2_fp8
fi
# tier 3: DP=2xTP=2 (saturation >= 0.9x DP; bursty medians below DP's)
step dp python3 benchmarks/run.py layout dp2_tp2_fp8 $L --workloads $W
step shift_dp beside dp shift_tp2_sp2_fp8 $WD dp2_tp2_fp8
step report2 reports
# tier 4 (SP=4 and its Shift, H200 only, with the peer's same two layouts) is its own plan:
# plans/four-gpu-sp4.sh.
# tier 5, if time is left: one Poisson rate near TP=4's knee (4k/250 at 4 requests/s, 32
# requests; ~4 req/s is TP=4's estimated saturation rate: move it once tier 1 measured it),
# served again in its own set (~4.5 min a layout); then the FP8 KV cache (~7.5 min a layout)
R=q4k_4
[[ $S == tiny ]] && R=q4k_1
step rate python3 benchmarks/run.py layout shift_tp2_sp2_fp8 tp4_fp8 $L --tag rate --workloads $R
step fp8kv python3 benchmarks/run.py layout shift_tp2_sp2_fp8kv tp4_fp8kv $L --tag fp8kv \
  --workloads $WK
step report4 reports
