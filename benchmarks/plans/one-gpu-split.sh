# Where one user's TTFT goes, measured directly (a plan for benchmarks/session.sh;
# kind nvidia-h200, ~7 min): run.py's own warm-up now keeps the /metrics window
# to exactly the measured requests, so the split needs no correction (run 3
# corrected for a prefix-cache hit by arithmetic, docs/benchmarks/h200-1gpu-run3/).
step model env PYTHONPATH=/tmp/site python3 benchmarks/run.py setup --shape 8b
step split python3 benchmarks/run.py layout tp1 tp1_ours --workloads lat1k,lat8k,lat32k
step report python3 benchmarks/run.py report
