# 70B FP8: Shift on weight views >= 1.2x TP=4 at saturation (issue 47)?
# Kind: nvidia-h200-x4 / nvidia-h100-x4.
# Results: benchmarks/results/2026-11-27-4gpu-70b-fp8-sat-views-h100 (resume: TP=4 next).
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag satv"
W=sat4k_500,prof5_sat4k_500
[[ $S == tiny ]] && W=sat,prof2_sat
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
if [[ $S != tiny ]]; then
  step eq_views env PYTHONPATH=$SITE_OURS EQ_GPU_UTIL=0.06 python3 -m benchmarks.equivalence \
    family llama "$CKPT_DIR/llama" "$res/equiv-views" tp1 tp4 tp2sp2_shift --timeout 600
  step eq_views_report python3 -m benchmarks.equivalence report "$res/equiv-views" \
    --md "$res/equiv-views/report.md"
fi
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
step shift python3 -m benchmarks.run layout shift_tp2_sp2_fp8 $L --workloads $W
step tp4 python3 -m benchmarks.run layout tp4_fp8 $L --workloads ${W%%,*}
# resumed on a new lease, Shift is served again beside TP=4 (set $S-satvb) before TP=4's profile
step shift_tp4 beside satvb shift_tp2_sp2_fp8 ${W%%,*} tp4_fp8
step tp4_prof python3 -m benchmarks.run layout tp4_fp8 $L --workloads ${W#*,}
step report reports
