#!/usr/bin/env bash
# On the GPU host, once every part from benchmarks/stage.py is in PARTS_DIR:
#   bash benchmarks/host-setup.sh PARTS_DIR
# -> the image's Python: the official vLLM wheel installed as `pip install vllm`
#    installs it (unpack.sh); $BENCH_DIR/res/env.txt: pip check and versions
#    $SITE_OFFICIAL  an empty folder: the official rows run the image's Python as is
#    $SITE_OURS      a hard-linked copy of the installed vllm package with our
#                    patched files laid over it (PYTHONPATH puts it first)
#    $SITE_BEFORE    the same for ours before a speed change, when staged (stage.py --before)
#    $SITE_ARCTIC    ArcticInference (over the official install), when its sdist is in PARTS_DIR
# (paths and their defaults: hostpaths.sh)
set -euo pipefail
parts=$1
# shellcheck source=hostpaths.sh
source "$(dirname "${BASH_SOURCE[0]}")/hostpaths.sh"
mkdir -p "$BENCH_DIR/res"
bash "$parts/unpack.sh" "$parts" "$BENCH_DIR/res/env.txt"
installed=$(python3 -c 'import os, vllm; print(os.path.dirname(vllm.__file__))')
rm -rf "$SITE_OFFICIAL" "$SITE_OURS"
mkdir -p "$SITE_OFFICIAL" "$SITE_OURS"
cp -al "$installed" "$SITE_OURS/vllm"
# --unlink-first: never write through a hard link into the official copy.
tar -xzf "$parts/ours.tar.gz" -C "$SITE_OURS" --unlink-first
while read -r f; do [[ -n "$f" ]] && rm -f "$SITE_OURS/$f"; done < "$SITE_OURS/DELETED"
# Ours before a speed change (stage.py --before REV), laid out the same way.
rm -rf "$SITE_BEFORE"
if [[ -f $parts/ours-before.tar.gz ]]; then
  mkdir -p "$SITE_BEFORE"
  cp -al "$installed" "$SITE_BEFORE/vllm"
  tar -xzf "$parts/ours-before.tar.gz" -C "$SITE_BEFORE" --unlink-first
  while read -r f; do [[ -n "$f" ]] && rm -f "$SITE_BEFORE/$f"; done < "$SITE_BEFORE/DELETED"
  PYTHONPATH=$SITE_BEFORE python3 -c 'import vllm; print("before", vllm.__version__, vllm.__file__)'
fi
PYTHONPATH=$SITE_OFFICIAL python3 -c 'import vllm; print("official", vllm.__version__, vllm.__file__)'
PYTHONPATH=$SITE_OURS python3 -c 'import vllm; print("ours", vllm.__version__, vllm.__file__)'
# FlashInfer's kernels compiled by an earlier lease (a session.sh poll returns
# them as $OUT/fi-cache.tgz when more were built): the JIT of the fused all-reduce takes ~2.5 min
# of a lease's start-ups otherwise.  Same image, same cards' architecture.  The
# archive keeps the lease's file times, older than FlashInfer's sources as this
# lease's install just wrote them: ninja then rebuilt every kernel (the 4xH100
# lease of 2026-11-27: trtllm_comm 3 min and sampling 2 min of Shift's start), so
# the unpacked files are dated now.
if [[ -f $parts/fi-cache.tgz ]]; then
  mkdir -p ~/.cache && tar -xzf "$parts/fi-cache.tgz" -C ~/.cache --touch
  echo "flashinfer JIT cache: $(du -sh ~/.cache/flashinfer | cut -f1) from an earlier lease"
fi
for sdist in "$parts"/arctic_inference-*.tar.gz; do
  if [[ -f $sdist ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/arctic-setup.sh" "$sdist" "$SITE_ARCTIC"
  fi
done
