# Issue 47, 4 GPUs, one lease: the 70B FP8 shape at saturation and on the bursty trace, Shift
# TP=2xSP=2 beside TP=4 and DP=2xTP=2.  four-gpu.sh's tier 1 ran every other row on one lease
# (benchmarks/results/2026-11-27-4gpu-70b-fp8-h200/) but TP=4's sat4k_500 was cut; resuming it
# would serve both tier-1 layouts again (`beside`: a ratio compares rows of one lease), so
# this plan serves only what the saturation and bursty targets need, tiers 1 and 3 together,
# into their own result set ($BENCH_DIR/res/70b-sat, `run.py --tag sat`):
#   Shift: burst1, sat4k_500   TP=4: sat4k_500   DP=2xTP=2: burst1, sat4k_500
# (targets: saturation >= 1.2x TP=4 and >= 0.9x DP; the bursty trace's TTFT p50/p99 and
# TPOT p50 below DP's).  The anchor first, so a cut lease keeps the most comparable rows.
# Staged and started as four-gpu.sh is (its header); minutes, from the 4xH200 lease: Shift's
# start 9.5 (less once FlashInfer's JIT cache holds the fused all-reduce), TP=4's 3.6,
# burst1 ~1, sat4k_500 ~2 a layout: ~24 with the installs.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag sat"
WD=burst1,sat4k_500
WT=sat4k_500
[[ $S == tiny ]] && WD=burst1 WT=burst1
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
step shift python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $WD
step tp4 python3 benchmarks/run.py layout tp4_fp8 $L --workloads $WT
step dp python3 benchmarks/run.py layout dp2_tp2_fp8 $L --workloads $WD
step report python3 benchmarks/run.py report $L
