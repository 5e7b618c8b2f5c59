# 70B FP8: Shift TP=2xSP=2 against TP=4, the peer's shift, DP=2xTP=2 (issue 34)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4.
# Results: benchmarks/results/2026-11-26-4gpu-70b-fp8-tier1, 2026-11-27-4gpu-70b-fp8-h200.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S"
W=lat8k,lat32k,lat4k,burst1,sat4k_500
WP=lat8k,lat32k,lat4k,sat4k_500           # vs the peer: TTFT, TPOT, saturation
WD=burst1,sat4k_500                       # vs DP: saturation, the bursty trace
WK=lat4k,burst1,sat4k_500                 # the FP8 KV cache
# PLAN_SHAPE=tiny (the CPU dry run): two short workloads, no peer (it has no CPU plugin)
[[ $S == tiny ]] && W=lat8k,burst1 WP=lat8k WD=burst1 WK=burst1
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
# tier 1: Shift and TP=4 (TTFT 8k-32k >= 1.3x, TPOT <= 1.05x, saturation >= 1.2x, bursty)
step shift python3 -m benchmarks.run layout shift_tp2_sp2_fp8 $L --workloads $W
step tp4 python3 -m benchmarks.run layout tp4_fp8 $L --workloads $W
step shift_tp4 beside tp4 shift_tp2_sp2_fp8 $W tp4_fp8
step report1 reports
# tier 2: the peer's shift at the same layout (ours at least as good on TTFT, TPOT, saturation)
if [[ $S != tiny ]]; then
  step arctic_shift python3 -m benchmarks.run layout arctic_shift_tp2_sp2_fp8 $L --workloads $W
  step shift_peer beside peer shift_tp2_sp2_fp8 $WP arctic_shift_tp2_sp2_fp8
fi
# tier 3: DP=2xTP=2 (saturation >= 0.9x DP; bursty medians below DP's)
step dp python3 -m benchmarks.run layout dp2_tp2_fp8 $L --workloads $W
step shift_dp beside dp shift_tp2_sp2_fp8 $WD dp2_tp2_fp8
step report2 reports
# tier 4 (SP=4, H200 only) is four-gpu-sp4.sh; tier 5: one Poisson rate near TP=4's knee in a
# set of its own, then the FP8 KV cache
R=q4k_4
[[ $S == tiny ]] && R=q4k_1
step rate python3 -m benchmarks.run layout shift_tp2_sp2_fp8 tp4_fp8 $L --tag rate --workloads $R
step fp8kv python3 -m benchmarks.run layout shift_tp2_sp2_fp8kv tp4_fp8kv $L --tag fp8kv \
  --workloads $WK
step report4 reports
