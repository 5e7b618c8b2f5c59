#!/usr/bin/env bash
# On the GPU host, once every part from benchmarks/stage.py is in PARTS_DIR:
#   bash benchmarks/host-setup.sh PARTS_DIR
# -> $SITE_OFFICIAL  the official vLLM 0.26.0 wheel + runtime packages
#    $SITE_OURS      the same, hard-linked, with our patched files laid over it
#    $SITE_ARCTIC    ArcticInference (over $SITE_OFFICIAL), when its sdist is in PARTS_DIR
# (paths and their defaults, /tmp/site, /tmp/site-ours, /tmp/site-arctic: hostpaths.sh)
set -euo pipefail
parts=$1
# shellcheck source=hostpaths.sh
source "$(dirname "${BASH_SOURCE[0]}")/hostpaths.sh"
bash "$parts/unpack.sh" "$parts" "$SITE_OFFICIAL" > /dev/null
rm -rf "$SITE_OURS"
cp -al "$SITE_OFFICIAL" "$SITE_OURS"
# --unlink-first: never write through a hard link into the official copy.
tar -xzf "$parts/ours.tar.gz" -C "$SITE_OURS" --unlink-first
while read -r f; do [[ -n "$f" ]] && rm -f "$SITE_OURS/$f"; done < "$SITE_OURS/DELETED"
PYTHONPATH=$SITE_OFFICIAL python3 -c 'import vllm; print("official", vllm.__version__)'
PYTHONPATH=$SITE_OURS python3 -c 'import vllm; print("ours", vllm.__version__)'
for sdist in "$parts"/arctic_inference-*.tar.gz; do
  if [[ -f $sdist ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/arctic-setup.sh" "$sdist" "$SITE_ARCTIC"
  fi
done
