#!/usr/bin/env bash
# vLLM's torch.compile cache, carried between leases as FlashInfer's JIT cache is: compiling
# is a large part of a 70B Shift server's start (benchmarks/README.md), and the cache's
# entries carry the same names on every lease for the same wheel and layout.  An entry is one folder under
# ~/.cache/vllm/torch_compile_cache: `<hash>` (a model's compiled graphs, every rank) or
# `torch_aot_compile/<hash>` (Dynamo's output); ~40 MiB compressed for a 70B layout, more than
# one returned file may hold (16 MiB), so each goes as pieces `cc-<vllm>-<entry>.tgz.<i>of<n>`.
#
#   out          (host, session.sh's poll) pack each finished entry once (nothing written in
#                it for 120 s) and move pieces into $OUT within what one call brings back
#                (8 files, 64 MiB, res.tgz and fi-cache.tgz counted first); the rest wait
#                for the next poll
#   in PARTS     (host, host-setup.sh) unpack the carried entries (PARTS/cc/) into the cache;
#                they are not returned again
#   keep DIR...  (here) gather pieces from device result folders into
#                ~/.cache/vllm-sp/compile-cache/<vllm>/ and say which entries are whole
#   stage VER    (here) whole entries of vLLM VER into .gpuhost-cc/gNN (each within 62 MiB less the
#                working tree, which travels with every call), and the calls that carry them
set -uo pipefail
cache=${VLLM_CACHE_ROOT:-$HOME/.cache/vllm}/torch_compile_cache
piece=$((15 * 1024 * 1024))
budget=$((62 * 1024 * 1024))

entries() {     # every entry's path relative to the cache folder
  [[ -d $cache ]] || return 0
  (cd "$cache" && for d in */ torch_aot_compile/*/; do
    d=${d%/}
    [[ -d $d && $d != torch_aot_compile && $d != "torch_aot_compile/*" ]] && echo "$d"
  done)
}
name_of() { local e=${1/torch_aot_compile\//aot-}; echo "${e//\//-}"; }
# whole FIRST: FIRST is an entry's first piece (<stem>.1of<n>); true when all n are beside it
whole() {
  local stem=${1%.1of*} total=${1##*of}
  (( $(ls "$stem".*of"$total" 2>/dev/null | wc -l) == total ))
}

case "${1:-}" in
  out)
    : "${OUT:?out: no \$OUT}" "${BENCH_DIR:?}"
    pending=$BENCH_DIR/cc-pending sent=$BENCH_DIR/cc.returned
    mkdir -p "$pending"; touch "$sent"
    ver=$(cat "$BENCH_DIR/cc.version" 2>/dev/null) || {
      ver=$(PYTHONPATH=${SITE_OFFICIAL:-/tmp/site} python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null)
      [[ -n $ver ]] && echo "$ver" > "$BENCH_DIR/cc.version"; }
    [[ -n ${ver:-} ]] || exit 0
    while read -r e; do
      n=$(name_of "$e")
      grep -qxF "$n" "$sent" && continue
      [[ -n $(find "$cache/$e" -newermt "-120 seconds" -print -quit) ]] && continue
      # Dynamo's entry is whole once a rank saved its function (vLLM 0.33 writes `model`
      # after the compile and warm-up, minutes after its inductor_cache/ is last touched)
      [[ $e == torch_aot_compile/* && -z $(find "$cache/$e" -name model -type f -print -quit) ]] &&
        continue
      tar czf - -C "$cache" "$e" | split -b "$piece" -d -a 2 - "$pending/cc-$ver-$n.tgz.p"
      total=$(ls "$pending/cc-$ver-$n.tgz.p"* | wc -l)
      i=0
      for p in "$pending/cc-$ver-$n.tgz.p"*; do
        i=$((i + 1)); mv "$p" "$pending/cc-$ver-$n.tgz.${i}of$total"
      done
      echo "$n" >> "$sent"
    done < <(entries)
    files=$(find "$OUT" -maxdepth 1 -type f | wc -l)
    bytes=$(find "$OUT" -maxdepth 1 -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    for p in $(ls "$pending" 2>/dev/null | sort); do
      size=$(stat -c %s "$pending/$p")
      (( files + 1 > 8 || bytes + size > budget )) && break
      mv "$pending/$p" "$OUT/"; files=$((files + 1)); bytes=$((bytes + size))
    done ;;
  in)
    parts=$2/cc
    [[ -d $parts ]] || exit 0
    mkdir -p "$cache"
    : "${BENCH_DIR:?}"; touch "$BENCH_DIR/cc.returned"
    for first in "$parts"/cc-*.tgz.1of*; do
      [[ -f $first ]] || continue
      stem=${first%.1of*} total=${first##*of}
      if ! whole "$first"; then echo "compile cache: $(basename "$stem"): pieces missing, left out"; continue; fi
      for i in $(seq "$total"); do cat "$stem.${i}of$total"; done | tar xzf - -C "$cache" &&
        echo "compile cache: $(basename "$stem") from an earlier lease"
      # not returned again: the entry's name as `out` records it (cc-<vllm>-<name>.tgz)
      base=$(basename "$stem" .tgz); base=${base#cc-}; echo "${base#*-}" >> "$BENCH_DIR/cc.returned"
    done
    echo "compile cache: $(du -sh "$cache" | cut -f1) in $cache" ;;
  keep)
    shift
    store=$HOME/.cache/vllm-sp/compile-cache
    for d in "$@"; do
      for p in "$d"/cc-*.tgz.*of*; do
        [[ -f $p ]] || continue
        ver=$(basename "$p" | cut -d- -f2)
        mkdir -p "$store/$ver" && cp -n "$p" "$store/$ver/"
      done
    done
    for v in "$store"/*/; do
      for first in "$v"cc-*.tgz.1of*; do
        [[ -f $first ]] || continue
        stem=${first%.1of*} total=${first##*of}
        echo "$(basename "$v") $(basename "$stem"): $(ls "$stem".*of"$total" | wc -l) of $total pieces$(whole "$first" && echo ", whole")"
      done
    done ;;
  stage)
    ver=$2 store=$HOME/.cache/vllm-sp/compile-cache/$2
    rm -rf .gpuhost-cc; g=0 size=0
    # a call carries the working tree too (tracked and untracked-not-ignored files)
    tree=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
      awk '{s += $1} END {print s + 0}')
    cap=$((62 * 1024 * 1024 - tree))
    for first in "$store"/cc-*.tgz.1of*; do
      [[ -f $first ]] || continue
      whole "$first" || continue
      stem=${first%.1of*} total=${first##*of}
      for i in $(seq "$total"); do
        p=$stem.${i}of$total s=$(stat -c %s "$p")
        if (( size > 0 && size + s > cap )); then g=$((g + 1)); size=0; fi
        mkdir -p ".gpuhost-cc/g$(printf %02d $g)" && cp "$p" ".gpuhost-cc/g$(printf %02d $g)/"
        size=$((size + s))
      done
    done
    [[ -d .gpuhost-cc ]] || { echo "compile cache: nothing whole for vLLM $ver"; exit 0; }
    for d in .gpuhost-cc/g*; do
      echo "call: mkdir -p /root/gh/cc && mv $d/* /root/gh/cc/   carry [\"$d\"]   ($(du -sh "$d" | cut -f1))"
    done ;;
  *) echo "usage: $0 out | in PARTS | keep DIR... | stage VER" >&2; exit 2 ;;
esac
