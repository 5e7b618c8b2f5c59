#!/usr/bin/env bash
# Every commit made after the one that added this file has a subject of at
# most $MAX characters (the why goes in the body).  "After": descendants of
# that commit (git's --ancestry-path), so commits of a branch merged in later
# that were made beside it are not judged.  A shallow clone may lack the
# adding commit: then it says so and checks the commits it holds.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAX=${SUBJECT_MAX:-72}
base=$(git log --diff-filter=A --format=%H -- ci/subjects.sh | tail -1)
shallow=$(git rev-parse --git-path shallow)
if [[ -z $base ]]; then
  echo "subjects: no commit here adds ci/subjects.sh: checking every commit"
  range=(HEAD)
elif [[ -f $shallow ]] && grep -qx "$base" "$shallow"; then
  # a shallow clone's oldest commit shows every file as added
  echo "subjects: the commit that adds this check is not in this shallow clone:" \
    "checking the $(git rev-list --count HEAD) commits it holds"
  range=(HEAD)
else
  range=(--ancestry-path "$base..HEAD")
fi
# characters, not bytes (a subject may hold × or ≤)
long=$(git log --format='%h %s' "${range[@]}" | python3 -c '
import sys
for line in sys.stdin.buffer.read().decode("utf-8", "replace").splitlines():
    if len(line.split(" ", 1)[-1]) > int(sys.argv[1]):
        print(len(line.split(" ", 1)[-1]), line)' "$MAX")
n=$(git rev-list --count "${range[@]}")
if [[ -n $long ]]; then
  echo "subjects: over $MAX characters (of $n commits checked):"
  echo "$long"
  exit 1
fi
echo "subjects: $n commits checked, each subject at most $MAX characters"
