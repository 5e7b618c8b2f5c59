# Sourced by ci/test.sh and .ci/run: `stage NAME cmd...` runs cmd, returns
# its status, and appends "NAME<TAB>seconds<TAB>status" to $CI_STAGE_TIMES
# (when set) for .ci/run's table of where the time went; $CI_STAGE_SUFFIX,
# when set, is added to NAME (a stage that ran beside another).
stage() {
  local name=$1${CI_STAGE_SUFFIX:-} t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  if [[ -n ${CI_STAGE_TIMES:-} ]]; then
    printf '%s\t%d\t%d\n' "$name" $((SECONDS - t0)) "$rc" >> "$CI_STAGE_TIMES"
  fi
  return "$rc"
}

# The table: one row a stage, in the order they ran.
stage_table() {
  [[ -s ${CI_STAGE_TIMES:-} ]] || return 0
  echo "== time per stage =="
  awk -F'\t' '{ printf "%7.1f min  %-60s %s\n", $2 / 60, $1, ($3 == 0 ? "ok" : "rc=" $3) }' \
    "$CI_STAGE_TIMES"
}
