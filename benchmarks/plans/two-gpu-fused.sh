# 8B: fused full-TP Shift correct, one user's TPOT in TP=2's spread (issue 44)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2.
# Results: none yet.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-8b}
L="--shape $S --tag fused"
W=lat4k,lat8k
[[ $S == tiny ]] && W=lat8k
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
[[ $S != tiny ]] && fused_equivalence "tp1 tp2 shift" "tp1+draft tp2+draft shift+draft" \
  "tp1+draft32 tp2+draft32 shift+draft32"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
# TP=2's first server and Shift's also trace one user's decode steps (prof2_lat4k): if Shift's
# TPOT misses, the kernels of a step of each say where
for lay in tp2 shift shift_before tp2_again; do
  w=$W
  [[ $S != tiny && ( $lay == tp2 || $lay == shift ) ]] && w=$W,prof2_lat4k
  step "$lay" python3 -m benchmarks.run layout "$lay" $L --workloads $w
done
step report reports
