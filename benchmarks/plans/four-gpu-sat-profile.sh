# 70B FP8: where a saturated step's time goes, Shift, DP, TP=4 (issue 47)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4.
# Results: benchmarks/results/2026-11-27-4gpu-70b-fp8-sat-profile-h100 (resume: TP=4 next).
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag satp"
W=sat4k_500,prof_sat4k_500
WT=prof5_sat4k_500,prof_sat4k_500
W5=prof5_sat4k_500
[[ $S == tiny ]] && W=sat,prof_sat WT=prof2_sat,prof_sat W5=prof2_sat L="$L --profile-after 3"
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
step shift python3 -m benchmarks.run layout shift_tp2_sp2_fp8 $L --workloads $W
step dp python3 -m benchmarks.run layout dp2_tp2_fp8 $L --workloads $W
step tp4 python3 -m benchmarks.run layout tp4_fp8 $L --workloads $WT
step shift5 python3 -m benchmarks.run layout shift_tp2_sp2_fp8 $L --workloads $W5
step report python3 -m benchmarks.run report $L
