# Issue 46, 4 GPUs (nvidia-h100-x4 / nvidia-h200-x4), vLLM 0.26.0: Shift at TP=2xSP=2 with
# both groups' all-reduce fused (a FlashInfer workspace per group of ranks, the patch
# flashinfer-allreduce-workspace-per-group), against TP=4.  Staged with the tree before the
# last speed change (Shift's full-TP steps no longer padded to SP) as $SITE_BEFORE:
#   python3 benchmarks/stage.py --vllm-version 0.26.0 --before dcfc9db     # main before full-TP steps went unpadded
# (leases 10-14 staged 03e64f7, main before the per-group workspace; its row never ran).
# Correct first (equivalence.py, seeded checkpoints, threshold 256 so both models run):
# Llama and Qwen3-MoE at TP=1, TP=4 and TP=2xSP=2 Shift, each Shift engine logging its
# workspaces per group (the report's "fused AR+norm": target 4 ranks x a group of 2 and 4
# ranks x a group of 4), and the draft model at tp1+draft, tp4+draft, tp2sp2_shift+draft,
# then in float32 (+draft32: lease 9's bf16 Shift row accepted 0.906 against TP=4's 0.990).
# Lease 9's Shift ran its full-TP model unfused (no compile range below the fusion's limit,
# fixed in c1cb644): run this plan fresh, not resumed from that lease's folder.
# Then served, the 70B shape in FP8 at the defaults: Shift (fused), TP=4, TP=4 again on lat4k
# (TPOT at one user: target within the spread of the two TP=4 servers), Shift and TP=4 also on
# sat4k_500; then one user's decode steps traced; then DP=2xTP=2 beside Shift (sat4k_500).
# Minutes (4xH100, leases 5-8): staging 2 + installs 3, equivalence ~8, Shift's start ~6.5
# (~4 with vLLM's compile cache carried), TP=4's ~4.5, lat4k ~1, sat4k_500 ~3: the first
# lease ends about TP=4's sat4k_500, which with Shift's is also issue 47's saturation ratio
# (views and fusion both in); a RESUME serves the rest, `beside` keeps ratios on one lease.
# Without FlashInfer's JIT cache and vLLM's compile cache (lease 14) TP=4's start took 534 s.
# Report: BENCH_DIR=<res> python benchmarks/run.py report --shape 70b --tag fused.
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
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
q=_fp8; [[ $S == tiny ]] && q=
step shift python3 benchmarks/run.py layout shift_tp2_sp2$q $L --workloads $W,$WS
step tp4 python3 benchmarks/run.py layout tp4$q $L --workloads $W,$WS
# TP=4's second server before Shift is served beside them: a lease resumed after `shift`
# (lease 10 ended there) then holds the TPOT target's three servers within its 30 minutes.
[[ $S != tiny ]] && step tp4_again python3 benchmarks/run.py layout tp4_fp8_again $L --workloads $W
# Lease 13 (4xH200) measured the TPOT gap (Shift 9.00 ms against TP=4's 8.78 and 8.81);
# lease 14 served both at sat4k_500 on one lease (70b-fusedd: Shift 1.08x) and traced TP=4's
# decode steps, Shift's trace cut.  So `sat_prof` now serves sat4k_500 only (both done: nothing
# on resume), and the decode steps go into a set of their own, 70b-fusede, on one lease: TP=4,
# Shift, and Shift before its full-TP steps went unpadded (a one-request step was padded to
# SP=2 tokens and replayed a 2-token graph, the one difference lease 13's logs showed), each
# lat4k (TPOT untraced) then prof2_lat4k
# (40 steps traced 2 s into lat4k's load; the profiler's flags only configure it, it traces
# from /start_profile, which run.py sends during the traced load it runs last).
step sat_prof python3 benchmarks/run.py layout tp4$q shift_tp2_sp2$q $L --tag fusedd \
  --workloads $WS
if [[ $S == tiny ]]; then
  step decode python3 benchmarks/run.py layout tp4$q shift_tp2_sp2$q $L --tag fusede \
    --workloads $W,prof2_$W
else
  step decode python3 benchmarks/run.py layout tp4$q shift_tp2_sp2$q shift_tp2_sp2_fp8_before \
    $L --tag fusede --workloads $W,prof2_$W
fi
# One user (TPOT: Shift within the two TP=4 servers' spread) in a set of its own: lease 13
# held it whole (70b-fusedb).
if [[ $S == tiny ]]; then
  step shift_tp4 beside fusedb shift_tp2_sp2$q $W tp4$q
else
  step shift_tp4 beside fusedb shift_tp2_sp2$q $W tp4$q tp4_fp8_again
fi
# DP=2xTP=2 beside Shift at saturation (issue 47: Shift >= 0.9x DP), each also traced 5 s into
# the load (prof5_: lease 14's 1.08x TP=4 missed 1.2x; where a saturated step's time goes).
step dp python3 benchmarks/run.py layout dp2_tp2$q $L --workloads $WS,prof5_$WS
step shift_dp beside fusedc shift_tp2_sp2$q $WS,prof5_$WS dp2_tp2$q
step report reports
