# 8B: Shift at saturation, bursts, rate curve vs DP=2, TP=2, the peer (issue 44)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2 (two leases).
# Results: none yet.
release 0.26.0 || return 0
S=${PLAN_SHAPE:-8b}
L="--shape $S --tag sat"
C=q4k_1,q4k_2,q4k_4,q4k_8,q4k_16
W=sat4k,burst1,$C,prof_sat4k
WP=sat4k,burst1,$C                         # the peer: no profile (its own step timing differs)
WB=sat4k,burst1                            # the ratios `beside` keeps on one lease
[[ $S == tiny ]] && C=q4k_1,q4k_2 W=sat,burst1,q4k_1,q4k_2,prof_sat WP=sat,burst1 WB=sat,burst1 \
  L="$L --profile-after 3"
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape $S
step shift python3 -m benchmarks.run layout shift $L --workloads $W
step dp2 python3 -m benchmarks.run layout dp2 $L --workloads $W
step shift_dp beside sat-dp shift $WB dp2
step tp2 python3 -m benchmarks.run layout tp2 $L --workloads $W
step shift_tp2 beside sat-tp2 shift $WB tp2
step report1 reports
if [[ $S != tiny ]]; then
  step arctic_shift python3 -m benchmarks.run layout arctic_shift $L --workloads $WP
  step shift_peer beside sat-peer shift $WB arctic_shift
fi
step report2 reports
