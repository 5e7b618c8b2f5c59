# The SP speed questions next on 2xH200 (a plan for benchmarks/session.sh; kind
# nvidia-h200-x2; ~22 min, so it can share a session with part of two-gpu.sh).
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/two-gpu-sp-speed.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 470
# 1. The exchange alone (benchmarks/results/2026-11-24-2gpu-sp-step-profile/: 8.2 ms of an
#    8k prefill at ~165 GB/s, 0.86 ms of a decode step in 64 small calls):
#    NCCL send/recv as ours, all_to_all_single, and a symmetric-memory put,
#    under NCCL's defaults and two p2p settings (~1 min each).
step exchange timeout 300 env PYTHONPATH=$SITE_OURS python3 benchmarks/exchange_bench.py --out "$res/exchange"
step exchange_ch timeout 300 env PYTHONPATH=$SITE_OURS NCCL_MIN_P2P_NCHANNELS=32 python3 benchmarks/exchange_bench.py \
  --out "$res/exchange" --tag=-min-p2p-nchannels-32
step exchange_chunk timeout 300 env PYTHONPATH=$SITE_OURS NCCL_P2P_NVL_CHUNKSIZE=2097152 python3 benchmarks/exchange_bench.py \
  --out "$res/exchange" --tag=-p2p-nvl-chunksize-2m
# 2. SP=2's 8k step again: the exchange op now asks Inductor for contiguous
#    input (219ae29), which should remove the 2.3 ms re-copy of the 2-GPU step profile.
step profile_8k env PYTHONPATH=$SITE_OURS python3 benchmarks/step_profile.py \
  --layout sp2 --prefill 8192 --decode 256 --out "$res/profile-p8192-d256"
# 3. The graph default served where it was not yet: shift (1k prompts now
#    replay a full-TP graph) against its old default, and TP=2 with the same
#    larger graphs for reference; 128 users once more for SP=2 both ways.
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step graphs python3 benchmarks/run.py layout shift shift_graphs512 tp2 tp2_graphs1024 \
  --workloads lat1k
step graphs_mid python3 benchmarks/run.py layout sp2 sp2_graphs512 --workloads lat1k,mid
# 4. SP=2's TTFT split like TP=1's (benchmarks/results/2026-11-24-1gpu-sp1-ttft-split/: ~35 ms of
#    TP=1's 8k TTFT was host work outside the engine's prefill, ~21 ms of it the first
#    token's detokenization, which the detokenizer-prime-with-prompt-tail patch bounds): SP=2 against TP=1 of both wheels,
#    the 8k and 32k ratios to TP=1 with the fix, and the fix's own effect at TP=1.
step split_8k python3 benchmarks/run.py layout sp2 tp1 tp1_ours --workloads lat8k,lat32k
step report python3 benchmarks/run.py report
