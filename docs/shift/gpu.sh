#!/usr/bin/env bash
# Shift Parallelism evidence on 2xH200, one resumable script.  Each step
# leaves done.STEP in /root/bench/res and is skipped when run again; results
# go to /root/bench/res (and to $OUT from `status`).
#
#   cp -r . /root/work && cd /root/work        # a copy no later call replaces
#   (env -u OUT setsid bash docs/shift/gpu.sh run PARTS_DIR [RESUME] > /dev/null 2>&1 < /dev/null &) &&
#   bash docs/shift/gpu.sh wait 500     # until done or 500 s; progress; results as $OUT/res.tgz
#
# Poll back to back: the host goes back after 30 s idle and keeps nothing.
# If it went back anyway, carry the last res.tgz to the fresh host as
# RESUME: the run starts from it and skips what it holds.  RESUME may also
# be a committed results folder (docs/shift/results-run2 holds shift's and
# SP=2's serving rows: a run resumed from it adds what is missing).
#
# Steps, in order of what the issue still needs:
#   1. installs: official vLLM 0.26.0 in /tmp/site, ours over it in /tmp/site-ours
#   2. equivalence: shift (threshold 256) on the seeded random 8B checkpoint of
#      docs/gpu/, compared with the TP=1 run committed there (top-1 agreement)
#   3. threshold sweep on one host: shift with thresholds 256 (the default,
#      again, so every point shares the host), 1024, 64, 2048, 32
#   4. serving: shift, SP=2, TP=2 through `vllm serve` + `vllm bench serve`
#      (Llama-3.1-8B shape, dummy weights; TTFT 1k/8k/32k, TPOT at one user,
#      128 users (2000 in / 250 out), throughput at saturation 2000 in / 250 out;
#      the context sweep: HTTP 400 past --max-model-len, server still healthy)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
res=/root/bench/res
mkdir -p "$res/equiv"
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1

step() {
  local name=$1; shift
  [[ -f "$res/done.$name" ]] && return 0
  echo "== $name $(date +%T)" >> "$res/progress.log"
  if "$@" >> "$res/progress.log" 2>&1; then
    touch "$res/done.$name"; echo "== $name ok $(date +%T)" >> "$res/progress.log"
  else
    echo "!! $name failed $(date +%T)" >> "$res/progress.log"
  fi
}

case "$1" in
  run)
    parts=$2
    cd "$here"
    if [[ -n "${3:-}" && ! -f "$res/progress.log" ]]; then
      if [[ -d "$3" ]]; then cp -r "$3"/. "$res"/; else tar xzf "$3" -C /root/bench; fi
      echo "== resumed from $3 $(date +%T)" >> "$res/progress.log"
      # what lived on the old host only (installs, model dir, checkpoint) is redone
      rm -f "$res"/done.{installs,hw,model,ckpt}
    fi
    step installs bash benchmarks/host-setup.sh "$parts"
    step hw bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m'
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
    echo "== all steps tried $(date +%T)" >> "$res/progress.log" ;;
  wait)       # a poll: returns as soon as every step was tried, else after $2 s
    for _ in $(seq "${2:-500}"); do
      grep -q "== all steps tried" "$res/progress.log" 2>/dev/null && break
      sleep 1
    done
    exec bash "$0" status ;;
  status)
    tail -n 25 "$res/progress.log" 2>/dev/null
    ls "$res" 2>/dev/null | tr '\n' ' '; echo
    if [[ -n "${OUT:-}" ]]; then
      # one archive: $OUT keeps only shallow folders
      tar czf "$OUT/res.tgz" -C /root/bench res --exclude='*.safetensors' 2>/dev/null
    fi ;;
esac
