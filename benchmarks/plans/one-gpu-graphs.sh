# Is a 1k-token prefill host-bound because it is ungraphed? (a plan for
# benchmarks/session.sh; kind nvidia-h200; ~12 min with staging).  TP=1's
# profile (benchmarks/results/2026-11-23-1gpu-sp1-vs-official/) showed a 1k prefill step with
# 21.6 ms of kernels in a 50.6 ms step: vLLM captures CUDA graphs up to 512
# tokens, so 1024 runs eager.  The SP speed issue's hypothesis is that the
# same is behind SP's and shift's 1k TTFT (an SP rank runs only 512 of the
# 1024 tokens, yet the step is too large for a graph).  One GPU settles the
# TP=1 half, served, back to back: default capture sizes vs up to 1024, and
# what the extra graphs cost at startup (capture time, memory: server logs).
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/one-gpu-graphs.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step graphs python3 benchmarks/run.py layout tp1 tp1_graphs1024 --workloads lat1k,mid
step profile_1k env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/step_profile.py \
  --layout tp1_graphs1024 --prefill 1024 --decode 128 --out "$res/profile-p1024-d128-graphs1024"
step report python3 benchmarks/run.py report
