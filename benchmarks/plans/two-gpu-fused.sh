# Issue 44, 2 GPUs (nvidia-h100-x2 / nvidia-h200-x2), vLLM 0.26.0: Shift's full-TP model with
# FlashInfer's fused all-reduce + RMSNorm (a workspace per group of ranks, the patch
# flashinfer-allreduce-workspace-per-group), before and after on one lease.  Staged with the
# tree before the change as $SITE_BEFORE:
#   python3 benchmarks/stage.py --vllm-version 0.26.0 --before 03e64f7     # main before the per-group workspace
# Correct first (equivalence.py, seeded checkpoints, threshold 256 so both models run):
# Llama and Qwen3-MoE at TP=1, TP=2 and Shift (SP=2), each Shift engine logging its
# workspaces per group ("fused AR+norm" in the report: at SP=2 two ranks x a group of 2, the
# full-TP group's; the SP model has no TP group), and the draft model at tp1+draft, tp2+draft
# and shift+draft (acceptance kept).  Then served, the 8B shape in bf16 at the defaults, in an
# order that spreads drift: TP=2, Shift (fused), Shift before (unfused), TP=2 again, each on
# lat4k (TPOT at one user: target within the spread of the two TP=2 servers) and lat8k.
# (The profiled workload runs last on its server: run.py orders it so.)
# Minutes (2xH100, guessed from 2026-11-26's lease): staging ~2 and installs ~3, equivalence
# ~7 (FlashInfer's JIT ~2.5 unless its cache is carried), each server ~2-3 + ~1.5 of load:
# ~27.  Report: BENCH_DIR=<res> python benchmarks/run.py report --shape 8b --tag fused.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-8b}
L="--shape $S --tag fused"
W=lat4k,lat8k
[[ $S == tiny ]] && W=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
[[ $S != tiny ]] && fused_equivalence "tp1 tp2 shift" "tp1+draft tp2+draft shift+draft" \
  "tp1+draft32 tp2+draft32 shift+draft32"
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
# TP=2's first server and Shift's also trace one user's decode steps last (prof2_lat4k: ~1
# min each, no server of its own; the profiler traces only then): if Shift's TPOT misses, the
# kernels a step of each say where (serve_profile.py's per-kernel table).
for lay in tp2 shift shift_before tp2_again; do
  w=$W
  [[ $S != tiny && ( $lay == tp2 || $lay == shift ) ]] && w=$W,prof2_lat4k
  step "$lay" python3 benchmarks/run.py layout "$lay" $L --workloads $w
done
step report reports
