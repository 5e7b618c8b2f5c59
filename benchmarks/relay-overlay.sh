#!/usr/bin/env bash
# On the GPU host, mid-lease: lay the overlay modules of the working tree this call carried
# over $SITE_OURS, so a fix to an overlay module runs in the lease's next step without
# restaging 3 GB.  build.sh copies overlay/ into the wheel as it is, so the files are the
# wheel's; a change to a patch is not covered (that needs stage.py's ours.tar.gz).
#   bash benchmarks/relay-overlay.sh      (from the carried tree's root)
# Prints each module it replaced: a results README names them and the commit, since the
# rows after it did not run on the staged wheel.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hostpaths.sh
source "$here/benchmarks/hostpaths.sh"
[[ -d $SITE_OURS/vllm ]] || { echo "relay-overlay.sh: no $SITE_OURS/vllm (host-setup.sh first)" >&2; exit 1; }
cd "$here/overlay"
while read -r f; do
  if ! cmp -s "$f" "$SITE_OURS/$f"; then
    # a new file, never a write through host-setup's hard link into the official install
    rm -f "$SITE_OURS/$f"
    cp "$f" "$SITE_OURS/$f"
    rm -rf "$(dirname "$SITE_OURS/$f")/__pycache__"
    echo "relay-overlay.sh: replaced $f"
  fi
done < <(find vllm -type f -name '*.py' | sort)
