# 70B FP8: Shift vs the peer's same layout, >= 0.9x DP=2xTP=2 saturated (issue 47)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4 (fresh each lease).
# Results: benchmarks/results/2026-11-27-4gpu-70b-fp8-vs-peer-h100 (DP cut).
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag peer"
W=lat8k,lat4k,sat4k_500
WD=sat4k_500
MEM="--gpu-memory-utilization 0.85"
[[ $S == tiny ]] && W=lat8k WD=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
if [[ $S != tiny ]]; then
  # NCCL says why, should the peer's start fail again
  step arctic_shift env NCCL_DEBUG=WARN python3 -m benchmarks.run layout \
    arctic_shift_tp2_sp2_fp8 $L --workloads $W --serve-args "$MEM"
fi
step shift python3 -m benchmarks.run layout shift_tp2_sp2_fp8 $L --workloads $W --serve-args "$MEM"
step dp python3 -m benchmarks.run layout dp2_tp2_fp8 $L --workloads $WD --serve-args "$MEM"
step report python3 -m benchmarks.run report $L
