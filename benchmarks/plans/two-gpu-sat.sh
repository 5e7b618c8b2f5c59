# Issue 44, 2 GPUs (nvidia-h100-x2 / nvidia-h200-x2), vLLM 0.26.0 (the peer's release): where
# Shift stands at saturation and under bursty and rising load against DP=2 and TP=2, and why.
# After two-gpu-fused.sh (Shift's full-TP model fused; its TPOT against two TP=2 servers), this
# serves the 8B shape in bf16 at the defaults into its own result set ($BENCH_DIR/res/8b-sat,
# `run.py --tag sat`), one server per layout running all of its workloads:
#   sat4k (1000 × 4000/250 at once: target Shift >= 0.95x DP=2, >= 1.1x TP=2), burst1 (the
#   bursty trace: median and p99 TTFT below TP=2's and DP=2's), q4k_1..16 (the latency-
#   throughput curve, Poisson arrivals, the plot `run.py report` draws), then prof_sat4k
#   (40 steps of sat4k traced on every rank 30 s in, `serve_profile.py`: per kind of step the
#   model that ran it, graph or eager, GPU time and host gaps; last, as a profiler once started
#   annotates every later step).
# Shift and DP=2 first (the saturation ratio), TP=2, then the peer's shift (ArcticInference
# 0.3.0, its SP=2 <-> TP=2) on the same workloads but the profile.  Staged as two-gpu.sh is (the
# Arctic sdist included); started, resumed and read as benchmarks/README.md says:
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-sat.sh /root/gh \
#      [RESUME] > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
#   BENCH_DIR=<res> python3 benchmarks/run.py report --shape 8b --tag sat
# What it would run, on any machine: BENCH_DIR=/tmp/bd bash benchmarks/session.sh dry PLAN.
# Minutes (2xH200/H100, from two-gpu.sh's estimates and 2026-11-26's lease): staging ~2 and
# installs ~3; server start TP=2 / DP=2 ~1.5, Shift and the peer ~2.5 (+3 once for FlashInfer's
# JIT unless its cache is carried); sat4k ~1.7, burst1 ~0.9, the curve ~2.5, a profile ~2:
# Shift ~10, DP=2 ~8.5, TP=2 ~6.5, the peer ~7.5: two leases, `beside` keeping the ratios on
# the second one's rows.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-8b}
L="--shape $S --tag sat"
C=q4k_1,q4k_2,q4k_4,q4k_8,q4k_16
W=sat4k,burst1,$C,prof_sat4k
WP=sat4k,burst1,$C                         # the peer: no profile (its own step timing differs)
WB=sat4k,burst1                            # the ratios `beside` keeps on one lease
[[ $S == tiny ]] && C=q4k_1,q4k_2 W=sat,burst1,q4k_1,q4k_2,prof_sat WP=sat,burst1 WB=sat,burst1 \
  L="$L --profile-after 3"
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
step shift python3 benchmarks/run.py layout shift $L --workloads $W
step dp2 python3 benchmarks/run.py layout dp2 $L --workloads $W
step shift_dp beside sat-dp shift $WB dp2
step tp2 python3 benchmarks/run.py layout tp2 $L --workloads $W
step shift_tp2 beside sat-tp2 shift $WB tp2
step report1 reports
if [[ $S != tiny ]]; then
  step arctic_shift python3 benchmarks/run.py layout arctic_shift $L --workloads $WP
  step shift_peer beside sat-peer shift $WB arctic_shift
fi
step report2 reports
