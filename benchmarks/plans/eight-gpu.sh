# 70B FP8, the Shift paper's setting: Shift, TP=8, DP, SP=8, the peer (issue 25)?
# Kind: nvidia-h200-x8 (never lent yet).
# Results: none yet.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S"
[[ $S == tiny ]] || L="$L --max-model-len 131072"
W=lat4k,sat4k,burst,lat8k,lat32k,lat128k     # the high-value rows
WS=lat4k,sat4k,burst,lat32k,lat128k          # SP without shift, SP=8
WK=lat4k,sat4k,burst                         # the FP8 KV-cache rows
C=q4k_1,q4k_4,q4k_8,q4k_16,q4k_32,q4k_64     # the curve
[[ $S == tiny ]] && W=burst WS=burst WK=burst C=burst
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
# tier 1 (session 1): Shift, its upstream reference, the peer's shift
step shift python3 -m benchmarks.run layout shift_tp2_sp4_fp8 $L --workloads $W
step tp8 python3 -m benchmarks.run layout tp8_fp8 $L --workloads $W
step arctic_shift python3 -m benchmarks.run layout arctic_shift_tp2_sp4_fp8 $L --workloads $W
step report1 python3 -m benchmarks.run report --shape $S
# tier 2 (session 2): DP, then SP without shift, ours and the peer's
step dp python3 -m benchmarks.run layout dp4_tp2_fp8 $L --workloads $W
step sp python3 -m benchmarks.run layout tp2_sp4_fp8 $L --workloads $WS
step arctic_sp python3 -m benchmarks.run layout arctic_tp2_sp4_fp8 $L --workloads $WS
step report2 python3 -m benchmarks.run report --shape $S
# tier 3 (a third session, if lent): the curve, SP=8, the FP8 KV cache row
step curve python3 -m benchmarks.run layout shift_tp2_sp4_fp8 tp8_fp8 dp4_tp2_fp8 $L --workloads $C
step sp8 python3 -m benchmarks.run layout sp8_fp8 $L --workloads $WS
step fp8kv python3 -m benchmarks.run layout shift_tp2_sp4_fp8kv tp8_fp8kv $L --workloads $WK
step report3 python3 -m benchmarks.run report --shape $S
