# The 8xH200 matrix at the seeds' own setting (issue 25): Llama-3.1-70B shape,
# FP8 (`--quantization fp8`: dummy bf16 weights quantized online), TP=8,
# DP=4xTP=2, TP=2xSP=4, SP=8, Shift (TP=2xSP=4 <-> TP=8) and ArcticInference
# 0.3.0 at TP=2xSP=4 and its shift.  A plan for benchmarks/session.sh, kind
# nvidia-h200-x8, staged with benchmarks/stage.py --vllm-version 0.26.0 (the Arctic sdist included):
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/eight-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
# Workloads (benchmarks/run.py): the Shift paper's 4k in / 250 out at one user
# (lat4k) and at saturation (sat4k, 1000 at once); one user's TTFT at 8k, 32k,
# 128k (lat128k: 130000 tokens, hence --max-model-len 131072 on every row);
# the bursty trace (`burst`: quiet 20 s / 128 at once / quiet 30 s / 256 at
# once / quiet 30 s, 4k/250, median and p99 TTFT and TPOT per phase); the
# latency-throughput curve (q4k_N: Poisson arrivals at N requests/s, 4k/250).
# Estimate (untested at 8 GPUs; from the 2- and 4-GPU runs and the one-H200
# 70B FP8 dry run): server start 3-5 min, the core workloads ~5 min, so a layout
# is ~9 min and two sessions hold about six.  Highest-value rows first; a report
# after each tier, so a session cut anywhere leaves one.  Resumable: the second
# session carries the first's res.tgz as RESUME.
# Dry run without GPUs: PLAN_SHAPE=tiny serves run.py's 2-layer shape on the installed CPU
# wheel (lengths capped at 256; the installs and hw steps fail there and are only logged):
#   PATH=$PWD/.venv-cpu/bin:$PATH BENCH_DIR=/tmp/bt PLAN_SHAPE=tiny \
#     bash benchmarks/session.sh run benchmarks/plans/eight-gpu.sh /nonexistent
release 0.26.0 || return 0
S=${PLAN_SHAPE:-70b}
L="--shape $S"
[[ $S == tiny ]] || L="$L --max-model-len 131072"
W=lat4k,sat4k,burst,lat8k,lat32k,lat128k     # the high-value rows
WS=lat4k,sat4k,burst,lat32k,lat128k          # SP without shift, SP=8
WK=lat4k,sat4k,burst                         # the FP8 KV-cache rows
C=q4k_1,q4k_4,q4k_8,q4k_16,q4k_32,q4k_64     # the curve
# the CPU dry run (2 cores serve 8 ranks slowly): every step, only the bursty trace; FP8 is
# dropped there (run.py serve)
[[ $S == tiny ]] && W=burst WS=burst WK=burst C=burst   # (the curve step then finds its rows done)
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape $S
# tier 1 (session 1): Shift, its upstream reference, the peer's shift
step shift python3 benchmarks/run.py layout shift_tp2_sp4_fp8 $L --workloads $W
step tp8 python3 benchmarks/run.py layout tp8_fp8 $L --workloads $W
step arctic_shift python3 benchmarks/run.py layout arctic_shift_tp2_sp4_fp8 $L --workloads $W
step report1 python3 benchmarks/run.py report --shape $S
# tier 2 (session 2): DP, then SP without shift, ours and the peer's
step dp python3 benchmarks/run.py layout dp4_tp2_fp8 $L --workloads $W
step sp python3 benchmarks/run.py layout tp2_sp4_fp8 $L --workloads $WS
step arctic_sp python3 benchmarks/run.py layout arctic_tp2_sp4_fp8 $L --workloads $WS
step report2 python3 benchmarks/run.py report --shape $S
# tier 3 (a third session, if lent): the curve, SP=8, the FP8 KV cache row
step curve python3 benchmarks/run.py layout shift_tp2_sp4_fp8 tp8_fp8 dp4_tp2_fp8 $L --workloads $C
step sp8 python3 benchmarks/run.py layout sp8_fp8 $L --workloads $WS
step fp8kv python3 benchmarks/run.py layout shift_tp2_sp4_fp8kv tp8_fp8kv $L --workloads $WK
step report3 python3 benchmarks/run.py report --shape $S
