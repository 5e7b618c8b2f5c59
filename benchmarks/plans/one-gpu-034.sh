# vLLM 0.34.0 (V2 runner only) on one GPU: what issue 84's item 4 asks of a single card?
# Kind: nvidia-h200 / nvidia-h100-x1.  Staging: stage.py --vllm-version 0.34.0.
# Results: benchmarks/results/<date>-1gpu-0.34.0-<card> (resume from its folder).
# Layouts with more than one rank run with every rank on the card (harness.shared_gpu:
# kernels and the runner checked; NVLink and speed not); the SP=1 comparison against the
# official wheel is a plain one-GPU server of each.  Order: does the V2 port run at all
# (Llama's layouts), speculative decoding under Shift on V2's speculators, a dead rank under
# Shift, SP=1 against the official wheel where the lease has time for it, every family the
# default's bar names (one-gpu-shared.sh's steps: Mamba-2, EP and MLA first, never on a GPU
# before), the bf16 draft model's spread row, then that plan's other rows.
release 0.34.0 || return 0
# shellcheck source=../plan-lib.sh
source "$here/benchmarks/plan-lib.sh"
eq_args=--shared-gpu
eq_timeout=1500
export EQ_GPU_UTIL=0.02 EQ_KV_BYTES=$((1 << 30))
S=${PLAN_SHAPE:-8b}
L="--shape $S"

step fi_version bash -c 'python3 -c "import flashinfer; print(\"flashinfer\", flashinfer.__version__)"; nvcc --version | tail -1; pip check'
eq_timeout=600 eq eq_llama llama tp1 tp2 tp4 sp2 shift tp2sp2_shift
# Each method at TP=1 and under Shift (SP=2 and TP=2 x SP=2); the draft model also in
# float32 (+draft32: whether a bf16 gap in acceptance is rounding), and at SP=2 without
# Shift (its config is resolved twice there too: ulysses_config.sizes_resolved).
eq eq_llama_spec llama tp1+ngram shift+ngram tp2sp2_shift+ngram tp1+draft shift+draft \
  tp1+eagle3 shift+eagle3 tp2sp2_shift+eagle3 tp1+draft32 shift+draft32 sp2+draft
# Suffix decoding, 0.34.0's own GPU speculator (a token corpus on each rank, no drafter
# model): under Shift at SP=2 and TP=2 x SP=2.
eq eq_llama_suffix llama tp1+suffix shift+suffix tp2sp2_shift+suffix
# TP=2 with MTP: upstream's own spread, the bound where Shift's target leaves TP=1's greedy
# path on most prompts (Qwen3-Next's did on 5 of 9 on an H100).
for fam in qwen3_next glm4_moe; do
  eq "eq_${fam}_mtp" "$fam" tp1+mtp shift+mtp tp2+mtp
done
# 0.34.0's extensible KV cache (on by default on CUDA, sized after both of Shift's models
# captured their graphs; every other row here sizes its cache explicitly, which turns it
# off): Shift at SP=2 and TP=2 x SP=2, TP=1 and TP=2 at vLLM's sizing, one engine at a time.
EQ_KV_BYTES=auto EQ_GPU_UTIL=0.2 EQ_JOBS=1 eq_dir=equiv-extensible \
  eq eq_llama_extensible llama tp1 tp2 shift tp2sp2_shift
# A worker of `-tp 2 -sp 2 --shift-parallel` killed while requests stream.
step dead_rank_shift env PYTHONPATH="$SITE_OURS" python3 -m benchmarks.dead_rank shift \
  --ckpt "$CKPT_DIR/llama" --out "$res/dead_rank/shift.json" --gpus 4 --shared-gpu
step eq_report_spec python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"
step eq_report_extensible python3 -m benchmarks.equivalence report "$res/equiv-extensible" \
  --md "$res/equiv-extensible/report.md"
# Shift's SP model reads Llama's gate/up output in blocks again (shift_weights.reads_output_whole
# knows `maybe_fused_act_quant(self.act_fn, ...)`); the Llama Shift rows above ran the gather
# before it. Those two layouts again on the blocked path, beside a TP=1 of their own.
eq_dir=equiv-blocked eq eq_llama_blocked llama tp1 shift tp2sp2_shift
step eq_report_blocked python3 -m benchmarks.equivalence report "$res/equiv-blocked" \
  --md "$res/equiv-blocked/report.md"
# SP=1: ours against the official wheel, A B B A in one step (~14 min). Its four servers count
# only from one lease, so it starts only where the lease has that left (`fits`, PLAN_UNTIL);
# the family rows, kept one by one, fill a shorter lease.
if fits 15; then
  step model env PYTHONPATH="$SITE_OFFICIAL" python3 -m benchmarks.run setup $L
  step sp1 python3 -m benchmarks.run layout tp1_ours_s1 tp1_s1 tp1_s2 tp1_ours_s2 $L \
    --workloads lat8k,sat
  step sp1_lease beside sp1 tp1_ours_s1 lat8k,sat tp1_s1 tp1_s2 tp1_ours_s2
  step report1 reports
fi
# Every family, Mamba-2, EP and MLA: the one-GPU tier's plan on this release, in two passes.
# First the families the default's bar names (the 0.33.0 GPU results' twelve, MLA), then
# the draft model's spread row below, then the rest of that plan (the FP8 KV rows,
# Falcon-H1, Zamba2, Bloom, Mistral): a short lease moves the default first.
PLAN_RELEASE=0.34.0
PLAN_FAMILIES="deepseek_v3 qwen3 qwen3_moe gpt_oss qwen3_next gemma3 llama4 glm4_moe qwen3_5 \
  qwen3_vl gemma3_vl qwen2_5_vl"
# shellcheck source=one-gpu-shared.sh
source "$here/benchmarks/plans/one-gpu-shared.sh"
# Last, as the float32 drafter already passes under Shift: where the bf16 target leaves
# TP=1's greedy path on most prompts (the draft model at SP=2 and under Shift did, on 6 and 9
# of 9), the rule judges acceptance over all prompts against upstream's own spread: TP=2 with
# the same drafter; SP=2's float32 twin names rounding.  vLLM's capture sizes, as its
# speculative rows had.
EQ_CAPTURE_SIZES= eq eq_llama_draft_spread llama tp2+draft sp2+draft32
# Qwen3.5's MTP layer under Shift (0.34.0 captures it in breakable CUDA graphs, as the
# target), against TP=1 and TP=2 with the same MTP, as Qwen3-Next's above.
eq eq_qwen3_5_mtp qwen3_5 tp1+mtp shift+mtp tp2+mtp
PLAN_FAMILIES=
# shellcheck source=one-gpu-shared.sh
source "$here/benchmarks/plans/one-gpu-shared.sh"
step eq_report_all python3 -m benchmarks.equivalence report "$res/equiv" --md "$res/equiv/report.md"
