# Where SP=2's step time goes, beside TP=2 and shift, and one hypothesis
# served (a plan for benchmarks/session.sh; kind nvidia-h200-x2; ~25 min).  The TP=1 profiles of
# the same steps (a DP=2 replica's decode is TP=1's 128-sequence step) are in
# benchmarks/results/2026-11-23-1gpu-sp1-vs-official/.  All layouts run our wheel: at SP=1 it is
# the official one within 1% (same run).
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-profile.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# 1k first: the launch-bound step behind SP's 1k TTFT (shift at its default,
# 1024, runs a 1k prompt in full TP, like TP=2: benchmarks/results/2026-11-23-2gpu-shift-layouts-threshold/).
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step profile_1k env PYTHONPATH=$SITE_OURS python3 benchmarks/step_profile.py \
  --layout sp2 tp2 --prefill 1024 --decode 128 --out "$res/profile-p1024-d128"
# The hypothesis TP=1's profile suggests: SP's 1k TTFT is host-bound because
# 1024 tokens exceed vLLM's largest CUDA graph (512), although an SP rank only
# runs 512 of them.  Same host, served: default capture sizes vs up to 1024.
# `mid` also keeps each request's start and TTFT (run.py saves them): at 128
# users shift's TTFT p50 was 3x TP=2's with equal end-to-end latency (2026-11-23-2gpu-shift-layouts-threshold).
step graphs python3 benchmarks/run.py layout sp2 sp2_graphs1024 shift shift_graphs1024 tp2 \
  --workloads lat1k,mid
step profile_8k env PYTHONPATH=$SITE_OURS python3 benchmarks/step_profile.py \
  --layout sp2 tp2 --prefill 8192 --decode 256 --out "$res/profile-p8192-d256"
