# Where things live on the GPU host: the one place for these paths, each
# overridable from the environment.  Sourced by session.sh (so every plan
# sees them), host-setup.sh and arctic-setup.sh; run.py reads the same
# variables with the same defaults.  The staged parts' folder is an argument
# of session.sh and host-setup.sh (the staging calls in README.md use /root/gh).
: "${SITE_OFFICIAL:=/tmp/site}"       # empty: the official wheel is pip-installed into the image itself
: "${SITE_OURS:=/tmp/site-ours}"      # the installed vllm package, hard-linked, ours laid over it
: "${SITE_BEFORE:=/tmp/site-before}"  # ours before a speed change (stage.py --before), if staged
: "${SITE_ARCTIC:=/tmp/site-arctic}"  # ArcticInference, a plugin over $SITE_OFFICIAL
: "${BENCH_DIR:=/root/bench}"         # run.py: results in res/ (what a poll archives), models in models/
: "${CKPT_DIR:=/root/ckpt}"           # equivalence.py's seeded checkpoints, one folder a family
export SITE_OFFICIAL SITE_OURS SITE_BEFORE SITE_ARCTIC BENCH_DIR CKPT_DIR
# The hosts forbid NVLink multicast (a program that uses it can take the shared
# GPUs out of service).  vLLM 0.26's FlashInfer all-reduce fusion (on by
# default at TP > 1 on Hopper) picks FlashInfer's "mnnvl" workspace, which
# creates multicast objects itself, past NCCL_NVLS_ENABLE=0; "trtllm" is what
# vLLM falls back to on a node without multicast, with the fusion kept on.
export VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm
# The host keeps multicast off in NCCL, PyTorch's symmetric memory and NVSHMEM
# (device/KINDS.md); these keep its values and only fill in one that a
# shell started without them lacks.  vLLM 0.26's symmetric-memory all-reduce
# (VLLM_ALLREDUCE_USE_SYMM_MEM=1, at TP 2-8 on Hopper) then finds no
# multicast and stays off: TP baselines here run NCCL's (and FlashInfer's
# fused) all-reduce, where a user's multicast-capable node would also get
# the multimem all-reduce at TP=4.  Results say so.
: "${NCCL_NVLS_ENABLE:=0}" "${TORCH_SYMM_MEM_DISABLE_MULTICAST:=1}" "${NVSHMEM_DISABLE_NVLS:=1}"
export NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS
