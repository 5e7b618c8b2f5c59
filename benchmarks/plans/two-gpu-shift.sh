# Shift Parallelism's evidence on 2xH200: a plan for benchmarks/session.sh
# (the installs come first, then these steps, each skipped once done):
#   (env -u OUT setsid bash benchmarks/session.sh run docs/shift/gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# RESUME may be docs/shift/results-run3 (top-1 done, sweep points 256 and 1024
# done; run 2's serving rows were on another host): a run resumed from it adds
# what is missing.
#
# Steps, in order of what the issue still needs:
#   1. equivalence: shift (threshold 256) on the seeded random 8B checkpoint of
#      docs/gpu/, compared with the TP=1 run committed there (top-1 agreement)
#   2. threshold sweep on one host: shift with thresholds 256 (the default,
#      again, so every point shares the host), 1024, 64, 2048, 32
#   3. serving: shift, SP=2, TP=2 through `vllm serve` + `vllm bench serve`
#      (Llama-3.1-8B shape, dummy weights; TTFT 1k/8k/32k, TPOT at one user,
#      128 users (2000 in / 250 out), throughput at saturation 2000 in / 250 out;
#      the context sweep: HTTP 400 past --max-model-len, server still healthy)
mkdir -p "$res/equiv"
step model env PYTHONPATH=/tmp/site python3 benchmarks/run.py setup --shape 8b
step ckpt env PYTHONPATH=/tmp/site python3 docs/gpu/sp_gpu.py ckpt /root/ckpt
step equiv env SHIFT=256 LAYOUT_SUFFIX=" shift256" PYTHONPATH=/tmp/site-ours \
  python3 docs/gpu/sp_gpu.py engine /root/ckpt --sp 2 --out "$res/equiv/shift256.json"
step equiv_report bash -c "PYTHONPATH=/tmp/site python3 docs/gpu/sp_gpu.py report \
  docs/gpu/results-2026-11-22/tp1_sp1.json docs/gpu/results-2026-11-22/tp2_sp1.json \
  docs/gpu/results-2026-11-22/tp1_sp2.json $res/equiv/shift256.json > $res/equiv/report.md"
step sweep python3 benchmarks/run.py layout shift_t256 shift_t1024 shift_t64 shift_t2048 \
  shift_t32 --workloads lat1k,mid,sat
step serve python3 benchmarks/run.py layout shift sp2 tp2 --workloads lat1k,lat8k,lat32k,mid,sat,ctx
step report python3 benchmarks/run.py report
