# Shift's serving evidence on one 2xH200 host: a plan for benchmarks/session.sh.
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-shift-serve.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 480
# two-gpu-shift.sh measures top-1 agreement; this plan puts everything the
# targets compare on one host, most needed first in case the 30 minutes run out
# (what it measured: benchmarks/results/2026-11-23-2gpu-shift-layouts-threshold/):
#   1. serving rows shift (threshold 256), SP=2, TP=2: TTFT 1k/8k/32k and TPOT at
#      one user, 128 users, saturation, the context sweep
#   2. the threshold sweep's other points (lat1k, mid, sat); `shift` above is its
#      256 point, measured with the same workloads on the same host
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step serve python3 benchmarks/run.py layout shift sp2 tp2 --workloads lat1k,lat8k,lat32k,mid,sat,ctx
step sweep python3 benchmarks/run.py layout shift_t1024 shift_t2048 shift_t64 shift_t32 \
  --workloads lat1k,mid,sat
step report python3 benchmarks/run.py report
