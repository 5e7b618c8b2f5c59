# Issue 45 (SP speed; was issue 35), 2 GPUs (nvidia-h200-x2 or nvidia-h100-x2; with 4 GPUs the SP=4 rows
# run too): each change measured alone, before against after, on one lease.  Stage with
# the tree before the change beside ours:
#   ./build.sh --version 0.26.0 && python3 benchmarks/stage.py --vllm-version 0.26.0 --before a7f5176
# (a7f5176: ours before runners-gather-sampled-rows; host-setup.sh lays it out as
# $SITE_BEFORE, run.py's *_before layouts serve it), then as plans/gpu-proof.sh:
#   cp -r . /root/work && cd /root/work
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/sp-speed.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 500
#
# Targets (issue 45; engine level, one prompt, Llama-3.1-8B shape, bf16, dummy weights):
# SP=2 >= 1.92x TP=1 at 8k, 32k and 128k, >= 1.1x TP=2 at 8k and never below TP=2;
# exposed exchange + copies + final gather <= 4% of the 8k step; served one-user 8k TTFT
# SP=2 >= 1.8x tp1_ours (same wheel).  (4 GPUs: SP=4 >= 3.7x TP=1, issue 35's.)  Read the
# profiles' span rows (step_profile.py --report) for the ratios, their all-to-all, copies
# and all-gather rows for the 4%.
#
# Minutes (2xH200, from the 2026-11-24 profile run): a profile ~2 (engine start, graphs),
# the 32k ones ~3; the exchange bench ~1 a setting; a served layout ~3 with lat8k,lat32k.
release 0.26.0 || return 0
four=0
(( $(nvidia-smi -L 2>/dev/null | wc -l) >= 4 )) && four=1
P="python3 benchmarks/step_profile.py"
# 0. Correct first: the GPU equivalence suite's Llama (vLLM 0.26 runs dense models on its V2
#    runner on GPUs, which the CPU engine cannot run) at TP=1, TP=2, SP=2 and Shift; its 2nd
#    round asks no prompt logprobs, so SP's prefills gather only the sampled rows, and the
#    report holds that round's first token to TP=2's distance from TP=1 (~4 min).
step eq_rows env PYTHONPATH=$SITE_OURS python3 benchmarks/equivalence.py family llama \
  "$CKPT_DIR/llama" "$res/equiv-rows" tp1 tp2 sp2 shift --timeout 600
step eq_rows_report python3 benchmarks/equivalence.py report "$res/equiv-rows" \
  --md "$res/equiv-rows/report.md"
# 1. The gather of the last hidden states: ours (sampled rows only) against before, SP=2,
#    with TP=1 as the reference, at 8k and 32k.  Shift at TP=2 also says whether its
#    models fuse FlashInfer's all-reduce (the 4xH200 equivalence run saw no workspace).
for n in 8192 32768; do
  step "profile_${n}_sp2" env PYTHONPATH=$SITE_OURS $P --layout sp2 tp1 tp2 --prefill $n \
    --decode 256 --out "$res/profile-p$n"
  step "profile_${n}_sp2_before" env PYTHONPATH=$SITE_BEFORE $P --layout sp2 --prefill $n \
    --decode 256 --out "$res/profile-p$n-before"
done
# 2. The exchange alone against its candidates (NCCL send/recv as ours, all_to_all_single,
#    a symmetric-memory put over NVLink without multicast), at NCCL's defaults and two
#    p2p settings: what the next change to the exchange should be.
step exchange env PYTHONPATH=$SITE_OURS python3 benchmarks/exchange_bench.py --out "$res/exchange"
step exchange_ch env PYTHONPATH=$SITE_OURS NCCL_MIN_P2P_NCHANNELS=32 \
  python3 benchmarks/exchange_bench.py --out "$res/exchange" --tag=-min-p2p-nchannels-32
step exchange_chunk env PYTHONPATH=$SITE_OURS NCCL_P2P_NVL_CHUNKSIZE=2097152 \
  python3 benchmarks/exchange_bench.py --out "$res/exchange" --tag=-p2p-nvl-chunksize-2m
# 3. Served: one user's 8k and 32k TTFT, SP=2 before and after against TP=1 of the same wheel
#    (tp1_ours: the 1.8x target) and TP=2 (the TTFT split); then 128k (130000 tokens, the
#    engine's own chunking), which needs the shape's whole context (its own result set).
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step ttft python3 benchmarks/run.py layout tp1_ours sp2 tp2 sp2_before --workloads lat8k,lat32k
step ttft128k python3 benchmarks/run.py layout tp1_ours sp2 tp2 --workloads lat128k \
  --max-model-len 131072 --tag 128k
step report bash -c "python3 benchmarks/run.py report && python3 benchmarks/run.py report --tag 128k"
# 4. With 4 GPUs: SP=4 at 8k and 32k (target 3.7x TP=1).
if (( four )); then
  for n in 8192 32768; do
    step "profile_${n}_sp4" env PYTHONPATH=$SITE_OURS $P --layout sp4 --prefill $n --decode 256 \
      --out "$res/profile-p$n"
  done
fi
step profile_report bash -c "for d in $res/profile-p*; do $P --report --out \$d; done"
