# The 8-GPU plan's dry run on one H200 (issue 25, without the 8-GPU kind): the
# Llama-3.1-70B shape in FP8 (`--quantization fp8` on dummy weights) loads at
# TP=1 and serves one workload of each kind the 8-GPU plan runs -- one user at
# 4k/250 and at 32k, 4k/250 at saturation (64 at once), the bursty trace
# (`burst1`, the 8-GPU `burst` scaled to one GPU), one point of the curve --
# then the report.  A plan for benchmarks/session.sh, kind nvidia-h200 (the
# H100's 80 GB do not hold 70 GB of FP8 weights with a KV cache):
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/one-gpu-70b-fp8.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# Only the official wheel serves here (TP rows), so the staging may leave ours
# out.  The FP8 KV-cache row comes last: skipped when the session runs short.
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 70b
step tp1_fp8 python3 benchmarks/run.py layout tp1_fp8 --shape 70b \
  --workloads lat4k,burst1,sat4k_small,lat32k,q4k_1
step report python3 benchmarks/run.py report --shape 70b
step tp1_fp8kv python3 benchmarks/run.py layout tp1_fp8kv --shape 70b --workloads lat4k,burst1
step report2 python3 benchmarks/run.py report --shape 70b
# A second session (RESUME: the first's res.tgz): one user at 128k (130000
# tokens, --max-model-len 131072) and two more points of the 4k curve.
step tp1_fp8_long python3 benchmarks/run.py layout tp1_fp8 --shape 70b --max-model-len 131072 \
  --workloads lat128k,q4k_2,q4k_4
step report3 python3 benchmarks/run.py report --shape 70b
