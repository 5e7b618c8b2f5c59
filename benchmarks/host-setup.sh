#!/usr/bin/env bash
# On the GPU host, once every part from benchmarks/stage.py is in PARTS_DIR:
#   bash benchmarks/host-setup.sh PARTS_DIR
# -> /tmp/site       the official vLLM 0.26.0 wheel + runtime packages
#    /tmp/site-ours  the same, hard-linked, with our patched files laid over it
#    /tmp/site-arctic ArcticInference (over /tmp/site), when its sdist is in PARTS_DIR
set -euo pipefail
parts=$1
bash "$parts/unpack.sh" "$parts" /tmp/site > /dev/null
rm -rf /tmp/site-ours
cp -al /tmp/site /tmp/site-ours
# --unlink-first: never write through a hard link into the official copy.
tar -xzf "$parts/ours.tar.gz" -C /tmp/site-ours --unlink-first
while read -r f; do [[ -n "$f" ]] && rm -f "/tmp/site-ours/$f"; done < /tmp/site-ours/DELETED
PYTHONPATH=/tmp/site python3 -c 'import vllm; print("official", vllm.__version__)'
PYTHONPATH=/tmp/site-ours python3 -c 'import vllm; print("ours", vllm.__version__)'
for sdist in "$parts"/arctic_inference-*.tar.gz; do
  if [[ -f $sdist ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/arctic-setup.sh" "$sdist" /tmp/site-arctic
  fi
done
