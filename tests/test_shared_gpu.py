"""The one-GPU tier's mode (harness.shared_gpu): the plugin that puts every rank of
an engine on one GPU, as vLLM itself loads it.  Its engines run on the GPU host
(benchmarks/plans/one-gpu-shared.sh); here, without a GPU, what decides whether
they can start at all: vLLM finds the plugin by its entry point, every rank
(TP x SP x DP) maps to the first visible device, each process (a forked worker
too) is a host of its own to NCCL, FlashInfer finds no all-reduce backend (its
IPC workspace between processes of one card), and nothing changes without the
flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness import shared_gpu

# In a fresh interpreter: vLLM's own plugin loading, then what the engine's
# arguments resolve to, and NCCL's host id here and in a forked child.
PROBE = r"""
import json, os
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.engine.arg_utils import EngineArgs
out = {"ids": EngineArgs(model="m", tensor_parallel_size=2, sequence_parallel_size=2,
                         data_parallel_size=2)._resolve_device_ids(),
       "pid": os.getpid(), "hostid": os.environ.get("NCCL_HOSTID")}
try:
    EngineArgs(model="m", device_ids=[0, 1])._resolve_device_ids()
    out["device_ids"] = "accepted"
except ValueError as e:
    out["device_ids"] = str(e)
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.write(w, f"{os.getpid()} {os.environ.get('NCCL_HOSTID')}".encode())
    os._exit(0)
os.waitpid(child, 0)
out["child"] = os.read(r, 200).decode().split(" ")
from vllm.distributed.device_communicators import flashinfer_all_reduce as fi
out["fi_backend"] = (list(fi._resolve_fi_ar_backend(None))
                     if fi._resolve_fi_ar_backend.__name__ == "<lambda>" else "upstream's")
print("@@" + json.dumps(out))
"""


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][2:])


def test_every_rank_on_one_gpu_and_a_host_per_process(tmp_path):
    where = shared_gpu.install(tmp_path / "plugin")
    base = {k: v for k, v in os.environ.items() if k != "NCCL_HOSTID"}
    got = _probe(shared_gpu.env(where, base))
    assert got["ids"] == [0] * 8            # TP=2 x SP=2 ranks in each of 2 DP replicas
    assert "--device-ids has no meaning" in got["device_ids"]
    assert got["hostid"] == f"shared-gpu-{got['pid']}"
    child_pid, child_hostid = got["child"]
    assert child_hostid == f"shared-gpu-{child_pid}" != got["hostid"]
    assert got["fi_backend"] == [None, False], "a model's eager fused all-reduce: no IPC"


def test_without_the_flag_nothing_changes(tmp_path):
    where = shared_gpu.install(tmp_path / "plugin")
    env = shared_gpu.env(where, {k: v for k, v in os.environ.items()
                                 if k != "NCCL_HOSTID"})
    env[shared_gpu.FLAG] = "0"
    got = _probe(env)
    assert got["ids"] is None
    assert got["device_ids"] == "accepted"
    assert got["hostid"] is None and got["child"][1] == "None"
    assert got["fi_backend"] == "upstream's"


def test_engine_arguments():
    assert shared_gpu.engine_kwargs(1) == {
        "disable_custom_all_reduce": True,
        "compilation_config": {"pass_config": {"fuse_allreduce_rms": False}}}
    assert shared_gpu.engine_kwargs(4)["distributed_executor_backend"] == "mp"
