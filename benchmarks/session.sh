#!/usr/bin/env bash
# One GPU session's work as one resumable run: the installs, then the steps of
# a plan (a bash file of `step NAME COMMAND...` lines, e.g.
# benchmarks/plans/two-gpu.sh).  Each step leaves done.NAME in
# $BENCH_DIR/res (hostpaths.sh: /root/bench/res) and is skipped when run again;
# a poll returns everything as $OUT/res.tgz.
#
#   cp -r . /root/work && cd /root/work        # a copy no later call replaces
#   (env -u OUT setsid bash benchmarks/session.sh run PLAN PARTS_DIR [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
#   next calls: cd /root/work && bash benchmarks/session.sh wait 500
#   PLAN_UNTIL=$(( $(date +%s) + SECONDS_LEFT )) before `setsid`: a plan's `fits` steps run
#   only if they can finish before then
#   what a plan would run, on any machine: BENCH_DIR=/tmp/bd bash benchmarks/session.sh \
#      dry PLAN [RESUME]
#
# Poll back to back: the host goes back after 30 s idle and keeps nothing.
# If it went back anyway, carry the last res.tgz (or a committed results
# folder) to the fresh host as RESUME: the run starts from it and skips the
# steps it holds.  In a plan: $res (results), $parts (staged bundle), $here
# (the repository copy, the working directory) and hostpaths.sh's variables
# ($SITE_OFFICIAL, $SITE_OURS, $CKPT_DIR, ...).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hostpaths.sh
source "$here/benchmarks/hostpaths.sh"
res=$BENCH_DIR/res
mkdir -p "$res"
export PYTHONUNBUFFERED=1

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

# fits MINUTES: whether a step that must finish within one lease to count (A B B A servers)
# can still finish before PLAN_UNTIL (epoch seconds the lease's device time ends, set at the
# launch); true when unset or in a dry run.  A step it holds back stays undone for the next.
fits() {
  [[ -z ${PLAN_UNTIL:-} || ${BENCH_DRY_RUN:-} == 1 ]] && return 0
  (( $(date +%s) + $1 * 60 <= PLAN_UNTIL )) && return 0
  echo "== held back for a longer lease: $1 min, $(( (PLAN_UNTIL - $(date +%s)) / 60 )) left" \
    "$(date +%T)" >> "$res/progress.log"
  return 1
}

# release V: a plan's first line (`release 0.26.0 || return 0`), naming the vLLM release its
# results are from, so a resumed plan never mixes releases: true when V is installed, else a
# line naming the staging command and the plan stops (stage.py stages VLLM_VERSION unless told).
release() {
  local got
  if [[ ${BENCH_DRY_RUN:-} == 1 ]]; then echo "== vLLM $1 (stage.py --vllm-version $1)"; return 0; fi
  got=$(python3 -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)
  [[ $got == "$1" ]] && return 0
  echo "!! ${plan##*/}: the install is vLLM ${got:-(none)}, not $1: stage it with" \
    "benchmarks/stage.py --vllm-version $1" >> "$res/progress.log"
  return 1
}

case "$1" in
  run)
    plan=$2 parts=$3
    cd "$here"
    if [[ -n "${4:-}" && ! -f "$res/progress.log" ]]; then
      if [[ -d "$4" ]]; then cp -r "$4"/. "$res"/; else tar xzf "$4" -C "$BENCH_DIR"; fi
      echo "== resumed from $4 $(date +%T)" >> "$res/progress.log"
      # what lived on the old host only (installs, model dirs, checkpoints) is redone
      rm -f "$res"/done.{installs,hw,model,ckpt}
    fi
    step installs bash benchmarks/host-setup.sh "$parts"
    if ! grep -q "^smoke: ok" "$res/env.txt" 2>/dev/null; then    # unpack.sh's verdict
      echo "!! the install did not pass its smoke check (import, matmul, all-reduce):" \
        "$(grep -s "^smoke:" "$res/env.txt" || echo "no verdict in env.txt"); no plan step runs" \
        >> "$res/progress.log"
      echo "== all steps tried $(date +%T)" >> "$res/progress.log"
      exit 1
    fi
    step hw bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m'
    # shellcheck source=/dev/null
    source "$plan"
    echo "== all steps tried $(date +%T)" >> "$res/progress.log" ;;
  dry)        # what a plan would run, printed on any machine (no installs, no servers):
              #   BENCH_DIR=/tmp/bd bash benchmarks/session.sh dry PLAN [RESUME]
              # run.py steps print their servers and clients (BENCH_DRY_RUN=1) and what a
              # resumed folder skips; the plan's own functions run (their run.py calls dry
              # too); any other command is only printed.  Nothing is marked done.
    plan=$2
    cd "$here"
    export BENCH_DRY_RUN=1
    if [[ -n "${3:-}" ]]; then
      if [[ -d "$3" ]]; then cp -r "$3"/. "$res"/; else tar xzf "$3" -C "$BENCH_DIR"; fi
    fi
    step() {
      local name=$1; shift
      if [[ -f "$res/done.$name" ]]; then echo "== $name: done already"; return 0; fi
      echo "== $name: $*"
      if [[ " $* " == *" -m benchmarks.run "* ]] || declare -F "$1" > /dev/null; then
        "$@" || echo "!! $name: exit $?"
      fi
    }
    # shellcheck source=/dev/null
    source "$plan" ;;
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
      tar czf "$OUT/res.tgz" -C "$BENCH_DIR" res --exclude='*.safetensors' 2>/dev/null
      # FlashInfer's JIT-compiled kernels (~33 MiB), whenever a step has built
      # more of them since the last poll that returned them: the next lease
      # carries them to host-setup.sh (benchmarks/README.md, staging).
      built=$(find ~/.cache/flashinfer -name '*.so' 2>/dev/null | wc -l)
      if (( built > 0 )) && [[ $built != "$(cat "$BENCH_DIR/fi-cache.returned" 2>/dev/null)" ]]; then
        tar czf "$OUT/fi-cache.tgz" -C ~/.cache flashinfer && echo "$built" > "$BENCH_DIR/fi-cache.returned"
      fi
      # vLLM's torch.compile cache (~40 MiB a 70B layout): its finished entries, as many
      # pieces as this poll has room for, the rest at the next (compile-cache.sh says how)
      bash "$here/benchmarks/compile-cache.sh" out
    fi ;;
esac
