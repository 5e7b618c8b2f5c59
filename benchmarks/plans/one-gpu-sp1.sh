# SP=1 against the official wheel with today's series, and where one user's
# TTFT goes (a plan for benchmarks/session.sh; kind nvidia-h200, ~15 min):
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/one-gpu-sp1.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 470
# 1. The SP speed issue's "no regression at SP=1 (<= 1%)", again after the
#    series changed (graph default, exchange op tag: both SP>1 only), served
#    A B B A so that drift between servers shows.
# 2. Each workload now records the server's TTFT, queue and prefill means:
#    TP=1's 8k TTFT was ~20 ms above its profiled step (benchmarks/results/2026-11-23-1gpu-sp1-vs-official/),
#    a part no GPU count shrinks that caps SP=2's served ratio to TP=1.
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step tp1 python3 benchmarks/run.py layout tp1 --workloads lat1k,lat8k,lat32k,sat
step tp1_ours python3 benchmarks/run.py layout tp1_ours --workloads lat1k,lat8k,lat32k,sat
step again python3 benchmarks/run.py layout tp1_ours_again tp1_again --workloads lat1k,lat8k,sat
step report python3 benchmarks/run.py report
