# SP=2's prefill against TP=1 and TP=2, each change before/after (issue 45)?
# Kind: nvidia-h200-x2 / nvidia-h100-x2 (x4 adds SP=4).
# Results: none yet.
release 0.26.0 || return 0
four=0
(( $(nvidia-smi -L 2>/dev/null | wc -l) >= 4 )) && four=1
P="python3 -m benchmarks.step_profile"
# 0. Correct first: Llama's equivalence rows on the V2 runner (the CPU engine cannot run it);
#    the 2nd round asks no prompt logprobs, so SP's prefills gather only the sampled rows.
step eq_rows env PYTHONPATH=$SITE_OURS python3 -m benchmarks.equivalence family llama \
  "$CKPT_DIR/llama" "$res/equiv-rows" tp1 tp2 sp2 shift --timeout 600
step eq_rows_report python3 -m benchmarks.equivalence report "$res/equiv-rows" \
  --md "$res/equiv-rows/report.md"
# 1. The gather of the last hidden states: ours (sampled rows only) against before, SP=2,
#    with TP=1 as the reference, at 8k and 32k.
for n in 8192 32768; do
  step "profile_${n}_sp2" env PYTHONPATH=$SITE_OURS $P --layout sp2 tp1 tp2 --prefill $n \
    --decode 256 --out "$res/profile-p$n"
  step "profile_${n}_sp2_before" env PYTHONPATH=$SITE_BEFORE $P --layout sp2 --prefill $n \
    --decode 256 --out "$res/profile-p$n-before"
done
# 2. The exchange alone against its candidates (NCCL send/recv as ours, all_to_all_single,
#    a symmetric-memory put over NVLink without multicast), at NCCL's defaults and two
#    p2p settings: what the next change to the exchange should be.
step exchange env PYTHONPATH=$SITE_OURS python3 -m benchmarks.exchange_bench --out "$res/exchange"
step exchange_ch env PYTHONPATH=$SITE_OURS NCCL_MIN_P2P_NCHANNELS=32 \
  python3 -m benchmarks.exchange_bench --out "$res/exchange" --tag=-min-p2p-nchannels-32
step exchange_chunk env PYTHONPATH=$SITE_OURS NCCL_P2P_NVL_CHUNKSIZE=2097152 \
  python3 -m benchmarks.exchange_bench --out "$res/exchange" --tag=-p2p-nvl-chunksize-2m
# 3. Served: one user's 8k and 32k TTFT, SP=2 before and after against TP=1 of the same wheel
#    (tp1_ours: the 1.8x target) and TP=2 (the TTFT split); then 128k (130000 tokens, the
#    engine's own chunking), which needs the shape's whole context (its own result set).
step model env PYTHONPATH=$SITE_OFFICIAL python3 -m benchmarks.run setup --shape 8b
step ttft python3 -m benchmarks.run layout tp1_ours sp2 tp2 sp2_before --workloads lat8k,lat32k
step ttft128k python3 -m benchmarks.run layout tp1_ours sp2 tp2 --workloads lat128k \
  --max-model-len 131072 --tag 128k
step report bash -c "python3 -m benchmarks.run report && python3 -m benchmarks.run report --tag 128k"
# 4. With 4 GPUs: SP=4 at 8k and 32k (target 3.7x TP=1).
if (( four )); then
  for n in 8192 32768; do
    step "profile_${n}_sp4" env PYTHONPATH=$SITE_OURS $P --layout sp4 --prefill $n --decode 256 \
      --out "$res/profile-p$n"
  done
fi
step profile_report bash -c "for d in $res/profile-p*; do $P --report --out \$d; done"
