# Issue 47, 4 GPUs, one lease: Shift with its full-TP model on views of the SP model's merged
# QKV and gate/up weights (`shift_weights`, the fix for lease 7's reading: a KV cache 0.56x
# DP=2xTP=2's, a copy of 15.97 GiB a GPU), at saturation beside TP=4 (target >= 1.2x TP=4,
# 0.97x before), into their own result set ($BENCH_DIR/res/70b-satv, `run.py --tag satv`),
# each server at vLLM's defaults (0.92):
#   Shift TP=2xSP=2: sat4k_500, prof5_sat4k_500   TP=4: sat4k_500, prof5_sat4k_500
# The start-up line "GiB of its weights are views of the SP model's" and the KV cache size
# (server.log) are the memory reading; prof5_<w> traces 40 engine steps on every rank 5 s
# after the load reached the server (every layout prefills then).  Correct first: the GPU
# equivalence suite's Llama (4 KV heads: QKV and gate/up both viewed at TP=2xSP=2; real
# seeded weights, so each view is also checked against what the full-TP model loaded) at
# TP=1, TP=4 and TP=2xSP=2 Shift (~4 min).  Staged and started as four-gpu.sh is (its
# header), fresh.  Minutes, from leases 5-7 (4xH100): staging 2, installs 2.8, Shift's start
# 6.1 (less with vLLM's compile cache carried), TP=4's ~3.6, sat4k_500 ~3, a profile ~2.7:
# ~29, TP=4's profile last.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag satv"
W=sat4k_500,prof5_sat4k_500
[[ $S == tiny ]] && W=sat,prof2_sat
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
if [[ $S != tiny ]]; then
  step eq_views env PYTHONPATH=$SITE_OURS EQ_GPU_UTIL=0.06 python3 benchmarks/equivalence.py \
    family llama "$CKPT_DIR/llama" "$res/equiv-views" tp1 tp4 tp2sp2_shift --timeout 600
  step eq_views_report python3 benchmarks/equivalence.py report "$res/equiv-views" \
    --md "$res/equiv-views/report.md"
fi
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
step shift python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $W
step tp4 python3 benchmarks/run.py layout tp4_fp8 $L --workloads ${W%%,*}
# Lease 8 ran Shift's rows and ran out as TP=4's sat4k_500 ran: resumed, TP=4 runs on a new
# lease, so Shift is served again beside it (set $S-satvb) before TP=4's profile.  Staged
# from main after ee27c2f, that Shift also fuses its full-TP model's all-reduce (lease 8's
# did not): satvb is the comparison, satv's Shift row the views alone.
step shift_tp4 beside satvb shift_tp2_sp2_fp8 ${W%%,*} tp4_fp8
step tp4_prof python3 benchmarks/run.py layout tp4_fp8 $L --workloads ${W#*,}
step report reports
