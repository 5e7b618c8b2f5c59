# 8B bf16: Shift against TP=2, the peer's shift and DP=2; the soak (issue 34)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2.
# Results: none yet.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-8b}
L="--shape $S"
W=lat8k,lat4k,burst1,sat4k
WP=lat8k,lat4k,sat4k                       # vs the peer: TTFT, TPOT, saturation
WD=burst1,sat4k                            # vs DP: saturation, the bursty trace
# PLAN_SHAPE=tiny: the CPU dry run on the installed CPU wheel (no peer there)
[[ $S == tiny ]] && W=lat8k,burst1 WP=lat8k WD=burst1
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup $L
step shift python3 -m benchmarks.run layout shift $L --workloads $W
step tp2 python3 -m benchmarks.run layout tp2 $L --workloads $W
step shift_tp2 beside tp2 shift $W tp2
step report1 reports
if [[ $S != tiny ]]; then
  step arctic_shift python3 -m benchmarks.run layout arctic_shift $L --workloads $W
  step shift_peer beside peer shift $WP arctic_shift
fi
step dp2 python3 -m benchmarks.run layout dp2 $L --workloads $W
step shift_dp beside dp shift $WD dp2
step report2 reports
# if time is left: the GPU soak (1200 mixed requests at 256 users, 10% cancelled), its own set
step soak python3 -m benchmarks.run layout shift $L --tag soak --workloads soak
step report3 reports
