# 70B FP8: fused Shift's TPOT in TP=4's spread, >= 1.2x TP=4 saturated (issue 46)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4.
# Results: benchmarks/results/2026-11-28-4gpu-fused-shift-h100, 2026-11-28-4gpu-fused-shift-h200.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag fused"
W=lat4k
WS=sat4k_500
[[ $S == tiny ]] && W=lat8k WS=sat
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
[[ $S != tiny ]] && fused_equivalence "tp1 tp4 tp2sp2_shift" "tp1+draft tp4+draft tp2sp2_shift+draft" \
  "tp1+draft32 tp4+draft32 tp2sp2_shift+draft32"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
q=_fp8; [[ $S == tiny ]] && q=
step shift python3 -m benchmarks.run layout shift_tp2_sp2$q $L --workloads $W,$WS
step tp4 python3 -m benchmarks.run layout tp4$q $L --workloads $W,$WS
# TP=4's second server before Shift is served beside them (three servers for the TPOT target)
[[ $S != tiny ]] && step tp4_again python3 -m benchmarks.run layout tp4_fp8_again $L --workloads $W
# one user's decode steps, traced (prof2_): TP=4, Shift, and Shift before $SITE_BEFORE's change
step sat_prof python3 -m benchmarks.run layout tp4$q shift_tp2_sp2$q $L --tag fusedd \
  --workloads $WS
if [[ $S == tiny ]]; then
  step decode python3 -m benchmarks.run layout tp4$q shift_tp2_sp2$q $L --tag fusede \
    --workloads $W,prof2_$W
else
  step decode python3 -m benchmarks.run layout tp4$q shift_tp2_sp2$q shift_tp2_sp2_fp8_before \
    $L --tag fusede --workloads $W,prof2_$W
fi
# one user beside TP=4's two servers, in a set of its own
if [[ $S == tiny ]]; then
  step shift_tp4 beside fusedb shift_tp2_sp2$q $W tp4$q
else
  step shift_tp4 beside fusedb shift_tp2_sp2$q $W tp4$q tp4_fp8_again
fi
# DP=2xTP=2 beside Shift at saturation, each also traced 5 s into the load
step dp python3 -m benchmarks.run layout dp2_tp2$q $L --workloads $WS,prof5_$WS
step shift_dp beside fusedc shift_tp2_sp2$q $WS,prof5_$WS dp2_tp2$q
step report reports
