# Issue 47, 4 GPUs, one lease: the 70B FP8 shape against the peer (tier 2), then DP's
# saturation row that lease 3 cut (tier 3), each beside Shift at TP=2xSP=2 served once on
# this lease, into their own result set ($BENCH_DIR/res/70b-peer, `run.py --tag peer`):
#   Shift (ours): lat8k, lat4k, sat4k_500
#   ArcticInference 0.3.0's shift, same layout: lat8k, lat4k, sat4k_500
#   DP=2xTP=2 (official): sat4k_500
# (targets: ours at least as good as the peer's same layout on TTFT, TPOT and saturation;
# saturation >= 0.9x DP).  lat32k is left to a later lease: 8k is where TTFT was measured
# beside TP=4, and a cut lease should keep the saturation rows.  The anchor first; the peer
# before DP (its tier has never run; DP's sat4k_500 is the one row tier 3 lacks).
# Staged and started as four-gpu.sh is (its header), the peer's sdist included.  Minutes,
# from lease 3 (4xH100): Shift's start 10.4 (~5.5 expected with the dated FlashInfer cache of
# host-setup.sh), lat8k/lat4k ~0.7 each, sat4k_500 ~2.5 a layout; DP's start 3.6; the peer's
# start unmeasured at 70B (its TP=2 8B start on 2xH100 took ~3): ~27 with the installs.
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag peer"
W=lat8k,lat4k,sat4k_500
WD=sat4k_500
[[ $S == tiny ]] && W=lat8k WD=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
step shift python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $W
if [[ $S != tiny ]]; then
  step arctic_shift python3 benchmarks/run.py layout arctic_shift_tp2_sp2_fp8 $L --workloads $W
fi
step dp python3 benchmarks/run.py layout dp2_tp2_fp8 $L --workloads $WD
step report python3 benchmarks/run.py report $L
