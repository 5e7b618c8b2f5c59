# 70B FP8: SP=4 and its Shift against TP=4 and the peer's same layouts (issue 47)?
# Kind: nvidia-h200-x4 only (an 80 GB card cannot hold SP=4).
# Results: none yet.
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
  step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
  step shift_sp4 python3 -m benchmarks.run layout shift_sp4$q $L --workloads $W --serve-args "$SERVE_ARGS"
  step tp4 python3 -m benchmarks.run layout tp4$q $L --workloads $W --serve-args "$SERVE_ARGS"
  step shift_tp4 beside sp4b shift_sp4$q $W tp4$q
  if [[ $S != tiny ]]; then
    step arctic_shift env NCCL_DEBUG=WARN python3 -m benchmarks.run layout \
      arctic_shift_sp4_fp8 $L --workloads $W --serve-args "$SERVE_ARGS"
    step shift_peer beside sp4p shift_sp4_fp8 $W arctic_shift_sp4_fp8
  fi
  step sp4 python3 -m benchmarks.run layout sp4$q $L --workloads $WS --serve-args "$SERVE_ARGS"
  [[ $S != tiny ]] && step arctic_sp4 env NCCL_DEBUG=WARN python3 -m benchmarks.run layout \
    arctic_sp4_fp8 $L --workloads $WS --serve-args "$SERVE_ARGS"
fi
step report reports
