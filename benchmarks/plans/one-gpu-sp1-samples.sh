# SP=1 vs the official wheel, three more servers each, alternated (a plan for
# benchmarks/session.sh; kind nvidia-h200, ~14 min).  one-gpu-sp1.sh served
# ours slower at 1k twice and the official wheel faster twice (+13%), but the
# alternated step profiles (one-gpu-sp1-ab.sh) showed a host-side spread of
# 39-49 ms within each wheel: 2 + 2 servers cannot tell a regression from
# launch-to-launch spread.
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step s1 python3 benchmarks/run.py layout tp1_ours_s1 tp1_s1 --workloads lat1k,lat8k
step s2 python3 benchmarks/run.py layout tp1_s2 tp1_ours_s2 --workloads lat1k,lat8k
step s3 python3 benchmarks/run.py layout tp1_ours_s3 tp1_s3 --workloads lat1k,lat8k
