# Shift Parallelism's evidence on 2xH200: a plan for benchmarks/session.sh
# (the installs come first, then these steps, each skipped once done):
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-shift.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# RESUME may be benchmarks/results/2026-11-23-2gpu-shift-top1-sweep (top-1 done,
# sweep points 256 and 1024 done): a run resumed from it adds what is missing.
# The serving rows and the rest of the sweep on one host:
# benchmarks/plans/two-gpu-shift-serve.sh.
#
# Steps:
#   1. equivalence: shift (threshold 256) on sp_gpu.py's seeded random 8B
#      checkpoint, compared with the TP=1, TP=2 and SP=2 runs committed in
#      benchmarks/results/2026-11-22-2gpu-sp-equivalence-prefill/ (top-1 agreement)
#   2. threshold sweep on one host: shift with thresholds 256 (the default,
#      again, so every point shares the host), 1024, 64, 2048, 32
#   3. serving: shift, SP=2, TP=2 through `vllm serve` + `vllm bench serve`
#      (Llama-3.1-8B shape, dummy weights; TTFT 1k/8k/32k, TPOT at one user,
#      128 users (2000 in / 250 out), throughput at saturation 2000 in / 250 out;
#      the context sweep: HTTP 400 past --max-model-len, server still healthy)
release 0.26.0 || return 0
mkdir -p "$res/equiv"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step ckpt env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/sp_gpu.py ckpt "$CKPT_DIR"
step equiv env SHIFT=256 LAYOUT_SUFFIX=" shift256" PYTHONPATH=$SITE_OURS \
  python3 benchmarks/sp_gpu.py engine "$CKPT_DIR" --sp 2 --out "$res/equiv/shift256.json"
ref=benchmarks/results/2026-11-22-2gpu-sp-equivalence-prefill
step equiv_report bash -c "PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/sp_gpu.py report \
  $ref/tp1_sp1.json.gz $ref/tp2_sp1.json.gz $ref/tp1_sp2.json.gz \
  $res/equiv/shift256.json > $res/equiv/report.md"
step sweep python3 benchmarks/run.py layout shift_t256 shift_t1024 shift_t64 shift_t2048 \
  shift_t32 --workloads lat1k,mid,sat
step serve python3 benchmarks/run.py layout shift sp2 tp2 --workloads lat1k,lat8k,lat32k,mid,sat,ctx
step report python3 benchmarks/run.py report
