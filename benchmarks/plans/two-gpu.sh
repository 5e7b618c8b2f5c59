# The 2xH200 serving matrix, ours beside ArcticInference in one
# run (a plan for benchmarks/session.sh; kind nvidia-h200-x2).  ~4.5 min a
# layout, so it spans two sessions: the second carries the first's res.tgz as
# RESUME and runs what is missing.
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# Order: ours (with the >= 1000-request soak) and the peer's rows on one host
# first (the comparison that must share GPUs), then the upstream references,
# then the curves.
W=lat1k,lat8k,lat32k,sat,ctx
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step ours python3 benchmarks/run.py layout sp2 shift --workloads $W,soak
step peer python3 benchmarks/run.py layout arctic_sp2 arctic_shift --workloads $W
step refs python3 benchmarks/run.py layout tp2 dp2 tp1 --workloads $W
step curves python3 benchmarks/run.py layout shift sp2 tp2 dp2 --workloads rate2,rate4,rate8,rate16,rate32
step report python3 benchmarks/run.py report
