# Shift's serving evidence on one 2xH200 host: a plan for benchmarks/session.sh.
#   (env -u OUT setsid bash benchmarks/session.sh run docs/shift/gpu-run4.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 480
# Run 3 (docs/shift/results-run3) holds top-1 agreement and two sweep points of
# another host; this run puts everything the targets compare on one host, in
# order of what the issue needs if the 30 minutes run out:
#   1. serving rows shift (threshold 256), SP=2, TP=2: TTFT 1k/8k/32k and TPOT at
#      one user, 128 users, saturation, the context sweep
#   2. the threshold sweep's other points (lat1k, mid, sat); `shift` above is its
#      256 point, measured with the same workloads on the same host
step model env PYTHONPATH=/tmp/site python3 benchmarks/run.py setup --shape 8b
step serve python3 benchmarks/run.py layout shift sp2 tp2 --workloads lat1k,lat8k,lat32k,mid,sat,ctx
step sweep python3 benchmarks/run.py layout shift_t1024 shift_t2048 shift_t64 shift_t32 \
  --workloads lat1k,mid,sat
step report python3 benchmarks/run.py report
