# What one GPU can settle (a plan for benchmarks/session.sh; kind nvidia-h200):
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/one-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# 1. SP=1 costs nothing: our wheel at TP=1 against the official wheel on the
#    same workloads, back to back on one GPU (the SP speed issue's "no
#    regression at SP=1, <= 1%").
# 2. Where a TP=1 step's time goes (8k prefill, 1k prefill, decode of 256 and
#    of 128 sequences -- a DP=2 replica's step at the same load): the
#    single-GPU half of the profile SP=2 is compared with.
# 3. The rest of the TP=1 row of the 2-GPU matrix: 32k, 128 users, the
#    context sweep and the latency-throughput curve (Poisson arrivals).
# Installs (incl. building ArcticInference's module) run first in session.sh.
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step tp1 python3 benchmarks/run.py layout tp1 --workloads lat1k,lat8k,sat
step tp1_ours python3 benchmarks/run.py layout tp1_ours --workloads lat1k,lat8k,sat
step profile_8k env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/step_profile.py --layout tp1 \
  --prefill 8192 --decode 256 --out "$res/profile-p8192-d256"
step profile_1k env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/step_profile.py --layout tp1 \
  --prefill 1024 --decode 128 --out "$res/profile-p1024-d128"
step tp1_rows python3 benchmarks/run.py layout tp1 --workloads lat32k,mid,ctx,rate2,rate4,rate8,rate16
step report python3 benchmarks/run.py report
