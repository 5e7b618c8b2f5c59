#!/usr/bin/env bash
# On the GPU host, after ../shared/gpu-host/unpack.sh put our CUDA wheel in /tmp/site.
#   bash docs/gpu/run.sh ckpt                 random Llama-3.1-8B-shaped checkpoint in /root/ckpt
#   bash docs/gpu/run.sh engine TP SP         one layout -> /root/res/tpTP_spSP.json (+ log)
#   bash docs/gpu/run.sh report               tables from every result so far
# Results and logs are copied to $OUT when it is set.
set -euo pipefail
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /root/res
case "$1" in
  ckpt)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch, vllm; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "vllm", vllm.__version__)'
    [[ -f /root/ckpt/layer031.safetensors ]] || python3 "$here/sp_gpu.py" ckpt /root/ckpt
    du -sh /root/ckpt ;;
  engine)
    tag="tp$2_sp$3"
    python3 "$here/sp_gpu.py" engine /root/ckpt --tp "$2" --sp "$3" --out "/root/res/$tag.json" \
      > "/root/res/$tag.log" 2>&1 || { tail -60 "/root/res/$tag.log"; exit 1; }
    grep -E "@@done|V2|cudagraph|Capturing|compil|Ulysses|ERROR" "/root/res/$tag.log" | cut -c1-300 | tail -25 ;;
  report)
    python3 "$here/sp_gpu.py" report /root/res/*.json | tee /root/res/report.md ;;
esac
if [[ -n "${OUT:-}" ]]; then cp /root/res/* "$OUT"/ 2>/dev/null || true; fi
