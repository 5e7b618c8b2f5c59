# 70B FP8 at TP=1: every workload kind of eight-gpu.sh, its dry run (issue 25)?
# Kind: nvidia-h200 (two sessions).
# Results: benchmarks/results/2026-11-25-1gpu-70b-fp8-dryrun.
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape 70b
step tp1_fp8 python3 -m benchmarks.run layout tp1_fp8 --shape 70b \
  --workloads lat4k,burst1,sat4k_small,lat32k,q4k_1
step report python3 -m benchmarks.run report --shape 70b
step tp1_fp8kv python3 -m benchmarks.run layout tp1_fp8kv --shape 70b --workloads lat4k,burst1
step report2 python3 -m benchmarks.run report --shape 70b
# a second session (RESUME): one user at 128k and two more points of the 4k curve
step tp1_fp8_long python3 -m benchmarks.run layout tp1_fp8 --shape 70b --max-model-len 131072 \
  --workloads lat128k,q4k_2,q4k_4
step report3 python3 -m benchmarks.run report --shape 70b
