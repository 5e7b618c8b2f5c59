# Issue 47, 4 GPUs: the saturation row that four leases had not reached (DP=2xTP=2's sat4k_500
# beside Shift's) and where saturation's time goes, into their own result set
# ($BENCH_DIR/res/70b-satp, `run.py --tag satp`), each server at vLLM's defaults (0.92):
#   Shift TP=2xSP=2: sat4k_500, prof_sat4k_500   DP=2xTP=2: sat4k_500, prof_sat4k_500
#   TP=4: prof5_sat4k_500, prof_sat4k_500 (its sat4k_500 is lease 3's, 0.97x Shift's way round)
#   Shift again: prof5_sat4k_500
# prof_<w> (run.py: PROF) traces 40 engine steps on every rank, 30 s after the load reached the
# server, then stops the client; prof5_<w> 5 s after, when every layout prefills (lease 7's
# Shift window at 30 s held decodes only: its KV cache was full).  Rank 0's window per kind
# of step (prefill chunk + decodes or decodes alone, SP or TP model, graph or eager) is the
# reading the missed target (Shift >= 1.2x TP=4) asks for.  Staged and started as four-gpu.sh
# is (its header); lease 7 ran shift and dp (`results/2026-11-27-4gpu-70b-fp8-sat-profile-h100`):
# carry its res.tgz as RESUME.  Minutes, from leases 5-7 (4xH100): staging 2, installs 2.8,
# Shift's start 6.1, DP's 4.1, TP=4's ~3.6, sat4k_500 ~3, a profile ~2.7: ~21 after a RESUME.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag satp"
W=sat4k_500,prof_sat4k_500
WT=prof5_sat4k_500,prof_sat4k_500
W5=prof5_sat4k_500
[[ $S == tiny ]] && W=sat,prof_sat WT=prof2_sat,prof_sat W5=prof2_sat L="$L --profile-after 3"
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
step shift python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $W
step dp python3 benchmarks/run.py layout dp2_tp2_fp8 $L --workloads $W
step tp4 python3 benchmarks/run.py layout tp4_fp8 $L --workloads $WT
step shift5 python3 benchmarks/run.py layout shift_tp2_sp2_fp8 $L --workloads $W5
step report python3 benchmarks/run.py report $L
