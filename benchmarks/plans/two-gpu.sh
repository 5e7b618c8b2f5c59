# Issue 34, 2 GPUs: the Llama-3.1-8B shape in bf16 (dummy weights) served by Shift (SP=2
# <-> TP=2), TP=2, ArcticInference 0.3.0's shift (SP=2 <-> TP=2) and DP=2, in the issue's
# order of value.  A plan for benchmarks/session.sh, kind nvidia-h200-x2 (nvidia-h100-x2
# holds every row), staged with benchmarks/stage.py --vllm-version 0.26.0 (the Arctic sdist included):
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# What it would run, on any machine (no GPU; run.py prints its servers and clients):
#   BENCH_DIR=/tmp/bd bash benchmarks/session.sh dry benchmarks/plans/two-gpu.sh [RESUME]
#
# Installs as in four-gpu.sh: TP and DP the official wheel, Shift ours, the peer the official
# wheel with its plugin (run.py checks each); every row at its defaults, the fused
# all-reduce on with the trtllm workspace.  Workloads, cheap first: one user at 8k (TTFT),
# one user at 4k/250 (TTFT, TPOT), the bursty trace burst1, 4k/250 at saturation (sat4k:
# 1000 at once).  Results: $BENCH_DIR/res/8b/<layout>/<workload>.json, each written as it
# finishes and stamped with its lease; a RESUME skips the rows it holds.
#
# Minutes per row (2xH200, 8B, measured for the 2000/250 matrix; the 4k rows estimated):
# server start TP=2 / DP=2 ~1.5, Shift and the peer's shift ~2.5, + ~3 once per lease for
# FlashInfer's JIT of the fused all-reduce; lat8k ~0.4, lat4k ~0.5, burst1 ~0.9, sat4k ~1.7
# (3.5 together).  One lease less ~4.5 min of staging and installs:
#   shift 6 (+3 JIT) + tp2 5 + arctic_shift 6 + dp2 5 = ~25 min: DP's tail may spill into a
#   second lease, which then serves Shift again beside it (`beside`, res/8b-dp; ~3 min);
#   then, if lent: the >= 1000-request soak on Shift (~5 min with its server).
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
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup $L
step shift python3 benchmarks/run.py layout shift $L --workloads $W
step tp2 python3 benchmarks/run.py layout tp2 $L --workloads $W
step shift_tp2 beside tp2 shift $W tp2
step report1 reports
if [[ $S != tiny ]]; then
  step arctic_shift python3 benchmarks/run.py layout arctic_shift $L --workloads $W
  step shift_peer beside peer shift $WP arctic_shift
fi
step dp2 python3 benchmarks/run.py layout dp2 $L --workloads $W
step shift_dp beside dp shift $WD dp2
step report2 reports
# if time is left: the GPU soak (1200 mixed requests at 256 users, 10% cancelled), never run
# on a GPU yet (docs/benchmarks.md); its own result set, one server
step soak python3 benchmarks/run.py layout shift $L --tag soak --workloads soak
step report3 reports
