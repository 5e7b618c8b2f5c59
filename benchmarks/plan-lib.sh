# Helpers for the serving plans (plans/four-gpu.sh, plans/two-gpu.sh), sourced by a plan
# after it sets S (the shape) and L (run.py's shape arguments).  session.sh's `step` runs
# these functions like any command; `session.sh dry` runs them with run.py in dry mode.

# The smallest GPU's memory in MiB (0 without nvidia-smi); PLAN_GPU_MIB overrides it.
gpu_mib() {
  if [[ -n ${PLAN_GPU_MIB:-} ]]; then echo "$PLAN_GPU_MIB"; return 0; fi
  local m
  m=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | head -1)
  echo "${m:-0}"
}

# beside TAG ANCHOR WORKLOADS NEW...: ANCHOR's and NEW's rows of WORKLOADS on one machine lease,
# served again into the result set $S-TAG where a RESUME left them on two (`run.py beside`; its
# servers take the plan's $SERVE_ARGS, when set, as the plan's own steps do).
beside() {
  local tag=$1 anchor=$2 w=$3; shift 3
  # shellcheck disable=SC2086   # $L is words
  python3 -m benchmarks.run beside "$anchor" "$@" $L --into "$tag" --workloads "$w" \
    ${SERVE_ARGS:+--serve-args "$SERVE_ARGS"}
}

# eq STEP FAMILY LAYOUT...: a family's layouts not yet in $res/$eq_dir (default equiv) as one
# step: equivalence.py under ours, on its seeded checkpoints in $CKPT_DIR, each layout within
# $eq_timeout s (default 900); $eq_args, when set, are more of its words (--shared-gpu).
eq() {
  local name=$1 fam=$2; shift 2
  # shellcheck disable=SC2086   # $eq_args is words
  step "$name" env PYTHONPATH="$SITE_OURS" python3 -m benchmarks.equivalence family "$fam" \
    "$CKPT_DIR/$fam" "$res/${eq_dir:-equiv}" "$@" --timeout "${eq_timeout:-900}" ${eq_args:-}
}

# fused_equivalence LAYOUTS DRAFT_LAYOUTS [FLOAT32_DRAFT_LAYOUTS]: the fused-Shift plans'
# correctness rows (equivalence.py, ours, seeded checkpoints, into $res/equiv-fused): Llama then
# its draft-model rows (they read its checkpoint), then those in float32 (`+draft32`: whether a
# bfloat16 gap in acceptance is rounding), beside Qwen3-MoE; then the report.
fused_equivalence() {
  local layouts=$1 drafts=$2 drafts32=${3:-}
  export EQ_GPU_UTIL=0.06
  local eq_dir=equiv-fused
  # shellcheck disable=SC2086   # the layouts are words
  (eq eq_llama llama $layouts; eq eq_draft llama $drafts
   [[ -z $drafts32 ]] || eq eq_draft32 llama $drafts32) &
  # shellcheck disable=SC2086
  eq eq_qwen3_moe qwen3_moe $layouts &
  wait
  step eq_report python3 -m benchmarks.equivalence report "$res/equiv-fused" \
    --md "$res/equiv-fused/report.md"
}

# note TEXT: a line for the run's log (stdout in a dry run).
note() {
  if [[ ${BENCH_DRY_RUN:-} == 1 ]]; then echo "$*"; else echo "$*" >> "$res/progress.log"; fi
}

# reports: run.py's report of the shape's result set and of each tagged set beside it.
reports() {
  local d rc=0
  python3 -m benchmarks.run report $L > /dev/null && echo "report: $BENCH_DIR/res/$S/report.md" \
    || rc=1
  for d in "$BENCH_DIR/res/$S"-*/; do
    [[ -d $d ]] || continue
    d=${d%/}
    python3 -m benchmarks.run report $L --tag "${d##*/$S-}" > /dev/null \
      && echo "report: $d/report.md" || rc=1
  done
  return $rc
}
