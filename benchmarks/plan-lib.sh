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

# beside TAG ANCHOR WORKLOADS NEW...: a ratio compares rows of one machine lease (servers it
# starts take the plan's $SERVE_ARGS, when set, as the plan's own steps do).  When the
# NEW layouts' rows and ANCHOR's (those workloads) come from different leases -- NEW ran on a
# later lease than ANCHOR, after a RESUME -- serve ANCHOR again on this lease into the result
# set $S-TAG (`run.py --tag`), beside a copy of NEW's rows if they are this lease's, else
# beside NEW served again too; `run.py report --tag TAG` then holds the comparison.  Nothing
# to do when they already share a lease.  The rows compared are the plan's own result set:
# $S, or $S-X when $L says `--tag X`.
# A set $S-TAG that a RESUME brings in already holding the comparison on one lease is the
# answer too (a lease that served it and ended before the next step).  NEW's rows must exist;
# ANCHOR's need not (it is served again: a workload added to the comparison later).
beside() {
  local tag=$1 anchor=$2 w=$3; shift 3
  if python3 -m benchmarks.run leases "$anchor" "$@" $L --workloads "$w"; then
    echo "beside: $anchor and $* share a lease"; return 0
  fi
  local new w1 missing="" serve=("$anchor") to=$BENCH_DIR/res/$S-$tag from=$BENCH_DIR/res/$S
  if [[ -d $to ]] && python3 -m benchmarks.run leases "$anchor" "$@" $L --tag "$tag" \
      --workloads "$w"; then
    echo "beside: $anchor and $* share a lease in $S-$tag"; return 0
  fi
  [[ " $L " =~ " --tag "([^ ]+)" " ]] && from+=-${BASH_REMATCH[1]}
  for new in "$@"; do       # ANCHOR is served again whatever its rows (a workload it lacks)
    for w1 in ${w//,/ }; do
      [[ -f $from/$new/$w1.json ]] || missing+=" $new/$w1"
    done
  done
  if [[ -n $missing && ${BENCH_DRY_RUN:-} != 1 ]]; then
    # a failed row: its own step runs it again on the next RESUME, before this one
    echo "beside: missing$missing: nothing served beside $anchor"; return 1
  fi
  [[ -n $missing ]] && echo "beside (dry): no rows yet; should they end on two leases:"
  if python3 -m benchmarks.run leases "$@" $L --workloads "$w" --this-lease; then
    echo "beside: $* ran on this lease: their rows are copied to $to"
    if [[ ${BENCH_DRY_RUN:-} != 1 ]]; then
      mkdir -p "$to"
      for new in "$@"; do
        [[ -d $to/$new ]] || cp -r "$from/$new" "$to/"
      done
    fi
  else
    echo "beside: $* not (all) on this lease: served again beside $anchor"
    serve+=("$@")
  fi
  # shellcheck disable=SC2086   # $L is words
  python3 -m benchmarks.run layout "${serve[@]}" $L --tag "$tag" --workloads "$w" \
    ${SERVE_ARGS:+--serve-args "$SERVE_ARGS"}
}

# fused_equivalence LAYOUTS DRAFT_LAYOUTS [FLOAT32_DRAFT_LAYOUTS]: the fused-Shift plans'
# correctness rows (equivalence.py, ours, seeded checkpoints, into $res/equiv-fused): Llama then
# its draft-model rows (they read its checkpoint), then those in float32 (`+draft32`: whether a
# bfloat16 gap in acceptance is rounding), beside Qwen3-MoE; then the report.
fused_equivalence() {
  local layouts=$1 drafts=$2 drafts32=${3:-}
  export EQ_GPU_UTIL=0.06
  eq() {   # STEP FAMILY LAYOUT...
    local name=$1 fam=$2; shift 2
    step "$name" env PYTHONPATH="$SITE_OURS" python3 -m benchmarks.equivalence family "$fam" \
      "$CKPT_DIR/$fam" "$res/equiv-fused" "$@" --timeout 900
  }
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
