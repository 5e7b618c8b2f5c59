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
# lay_over SITE ARCHIVE: a hard-linked copy of the installed vllm package in SITE, ARCHIVE's
# files over it (--unlink-first: never write through a hard link into the official copy), the
# members it lists in DELETED removed.
lay_over() {
  mkdir -p "$1"
  cp -al "$installed" "$1/vllm"
  tar -xzf "$2" -C "$1" --unlink-first
  while read -r f; do
    if [[ -n "$f" ]]; then rm -f "$1/$f"; fi
  done < "$1/DELETED"
}
echo "host-setup.sh: $(date +%T) laying ours over the install"
rm -rf "$SITE_OFFICIAL" "$SITE_OURS" "$SITE_BEFORE"
mkdir -p "$SITE_OFFICIAL"
lay_over "$SITE_OURS" "$parts/ours.tar.gz"
# Ours before a speed change (stage.py --before REV), laid out the same way.
if [[ -f $parts/ours-before.tar.gz ]]; then
  lay_over "$SITE_BEFORE" "$parts/ours-before.tar.gz"
  PYTHONPATH=$SITE_BEFORE python3 -c 'import vllm; print("before", vllm.__version__, vllm.__file__)'
fi
PYTHONPATH=$SITE_OFFICIAL python3 -c 'import vllm; print("official", vllm.__version__, vllm.__file__)'
PYTHONPATH=$SITE_OURS python3 -c 'import vllm; print("ours", vllm.__version__, vllm.__file__)'
# FlashInfer's kernels compiled by an earlier lease (a session.sh poll returns
# them as $OUT/fi-cache.tgz when more were built): the JIT of the fused all-reduce
# and of the sampler took ~6 min of Shift's start otherwise.  Same image, same
# cards' architecture.  FlashInfer runs ninja on every load, and ninja rebuilds an
# output when an input it recorded (the source and every header in its deps log)
# is newer than the output's recorded time: this lease's install has just written
# FlashInfer's sources and torch's headers, so every carried kernel was rebuilt.
# Dating the unpacked outputs now (tar --touch) does not help: ninja then
# reads the deps log as stale.  So the archive keeps its times, and the inputs
# ninja recorded outside the cache are dated back (2000-01-01, before any build;
# only file times change, in this host's fresh install); ninja's dry run then
# says per kernel whether it is up to date.
fi_cache_current() {
  local d f op
  if ! command -v ninja > /dev/null; then
    echo "flashinfer JIT cache: no ninja on PATH: not checked"; return 0
  fi
  for d in ~/.cache/flashinfer/*/*/cached_ops/*/; do
    [[ -f $d/build.ninja ]] || continue
    op=$(basename "$d")
    { ninja -C "$d" -t deps | sed -n 's/^    //p'; ninja -C "$d" -t inputs; } | sort -u |
      while read -r f; do
        if [[ $f == /* && -f $f && $f != "$HOME"/.cache/flashinfer/* ]]; then
          touch -d @946684800 "$f"
        fi
      done
    if ninja -C "$d" -n 2>&1 | grep -q "no work to do"; then
      echo "flashinfer JIT cache: $op up to date"
    else
      echo "flashinfer JIT cache: $op to be rebuilt:" \
        "$(ninja -C "$d" -n -d explain 2>&1 | grep -m1 "explain:")"
    fi
  done
}
echo "host-setup.sh: $(date +%T) caches"
if [[ -f $parts/fi-cache.tgz ]]; then
  mkdir -p ~/.cache && tar -xzf "$parts/fi-cache.tgz" -C ~/.cache
  echo "flashinfer JIT cache: $(du -sh ~/.cache/flashinfer | cut -f1) from an earlier lease"
  fi_cache_current
  # what was carried in need not go back out (session.sh returns the cache when this changes)
  find ~/.cache/flashinfer -name '*.so' | wc -l > "$BENCH_DIR/fi-cache.returned"
fi
# vLLM's torch.compile cache of earlier leases ($parts/cc/, compile-cache.sh): a layout whose
# entries are there loads its compiled graphs instead of compiling them (~100 s a model at 70B)
bash "$(dirname "${BASH_SOURCE[0]}")/compile-cache.sh" in "$parts"
for sdist in "$parts"/arctic_inference-*.tar.gz; do
  if [[ -f $sdist ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/arctic-setup.sh" "$sdist" "$SITE_ARCTIC"
  fi
done
