# Where one user's TTFT goes, measured directly (a plan for benchmarks/session.sh;
# kind nvidia-h200, ~7 min): run.py's own warm-up now keeps the /metrics window
# to exactly the measured requests, so the split needs no correction (the earlier
# servers corrected for a prefix-cache hit by arithmetic,
# benchmarks/results/2026-11-24-1gpu-sp1-ttft-split/).
release 0.26.0 || return 0
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step split python3 benchmarks/run.py layout tp1 tp1_ours --workloads lat1k,lat8k,lat32k
step report python3 benchmarks/run.py report
