# Issue 47, 4xH200 only (nvidia-h200-x4): the rows an 80 GB card cannot hold.  SP=4 gives every
# GPU the whole 70B FP8 model (~68 GiB; Shift's full-TP views beside it), so SP=4, its Shift
# (SP=4 <-> TP=4) and the peer's same two layouts are the H200 tier of four-gpu.sh (tier 4),
# here on their own, the peer's included, beside TP=4 (targets: the best SP layout or Shift
# >= 1.3x TP=4 on TTFT at 8k and 32k; Shift's TPOT at one user <= 1.05x TP=4; each of ours at
# least as good as the peer's same layout on TTFT, TPOT and saturation).
# Staged and started as four-gpu.sh is (its header; the peer's sdist included), run fresh or
# RESUMEd from the last res.tgz; `beside` serves TP=4 again where a resumed lease left the
# rows of one comparison on two.  Every server at --gpu-memory-utilization 0.85, as in the
# head-to-head at TP=2xSP=2 (four-gpu-peer.sh: the peer did not start at vLLM's 0.92 there),
# so both installs get the same memory.
# Order: ours first (Shift SP=4, then TP=4: the TTFT target), then the peer's shift, then the
# two plain SP=4 rows.  Minutes, from leases 10 and 13 (4xH200): staging ~4 + installs ~4.5
# (the peer's build), Shift's start ~5.5, TP=4's ~3-5, the peer's ~7 (H100, lease 6); lat8k
# and lat32k ~0.6 each, lat4k ~1, sat4k_500 ~3: the first lease ends about the peer's shift.
# Report: BENCH_DIR=<res> python benchmarks/run.py report --shape 70b --tag sp4.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S --tag sp4"
W=lat8k,lat32k,lat4k,sat4k_500          # Shift, TP=4 and the peer's shift
WS=lat8k,lat32k                         # SP=4 alone: long prompts are its case
SERVE_ARGS="--gpu-memory-utilization 0.85"     # beside's servers take it too
q=_fp8
[[ $S == tiny ]] && W=lat8k,sat WS=lat8k q=
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
if [[ $S != tiny ]] && (( $(gpu_mib) < 100000 )); then
  note "== four-gpu-sp4.sh needs H200s: the smallest GPU has $(gpu_mib) MiB, < 100000: nothing run"
else
  step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
  step shift_sp4 python3 benchmarks/run.py layout shift_sp4$q $L --workloads $W --serve-args "$SERVE_ARGS"
  step tp4 python3 benchmarks/run.py layout tp4$q $L --workloads $W --serve-args "$SERVE_ARGS"
  step shift_tp4 beside sp4b shift_sp4$q $W tp4$q
  if [[ $S != tiny ]]; then
    step arctic_shift env NCCL_DEBUG=WARN python3 benchmarks/run.py layout \
      arctic_shift_sp4_fp8 $L --workloads $W --serve-args "$SERVE_ARGS"
    step shift_peer beside sp4p shift_sp4_fp8 $W arctic_shift_sp4_fp8
  fi
  step sp4 python3 benchmarks/run.py layout sp4$q $L --workloads $WS --serve-args "$SERVE_ARGS"
  [[ $S != tiny ]] && step arctic_sp4 env NCCL_DEBUG=WARN python3 benchmarks/run.py layout \
    arctic_sp4_fp8 $L --workloads $WS --serve-args "$SERVE_ARGS"
fi
step report reports
