# SPDX-License-Identifier: Apache-2.0
"""The loaded model under Ulysses SP: its ``forward`` takes the whole
(padded) step and returns the whole step's hidden states, while its layers
run on this SP rank's slice of the tokens (``shard_model_tokens``, which
the model loader's hook calls).

Why a module of its own, above the core: wrapping a model also checks that
SP can run it (every attention-like layer, GDN mixers included, has an
exchange: ``check_attention_layers``) and slices the per-token side inputs
a multimodal model keeps beside its embeddings
(``ulysses_multimodal.slice_side_inputs``, built on the core's token
slices), so the one function that does both sits above them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from vllm.distributed import ulysses, ulysses_moe, ulysses_multimodal

# The rows of the next forward's hidden states that the runner reads
# (``sampled_rows_only``); None: all of them.
_ROWS: torch.Tensor | None = None
# Forwards whose output gathered only the sampled rows / the whole step
# (the tests check that a prefill without prompt logprobs takes the first).
_GATHERS = {"rows": 0, "whole": 0}


def gather_counts() -> dict[str, int]:
    return dict(_GATHERS)


@contextmanager
def sampled_rows_only(runner: Any, logits_indices: torch.Tensor,
                      input_batch: Any = None) -> Iterator[None]:
    """Around one step's forward in the runner (V1; V2 passes its
    ``input_batch``): the SP model all-gathers only the rows the runner
    samples from (``logits_indices``), not the whole step's hidden states,
    where nothing else of the step reads them.

    Why: a prefill step samples one row per request, while the whole step
    is every token's hidden state (128 MiB for an 8k step at a 70B shape),
    gathered on the critical path of every prefill.  Prompt logprobs, a
    drafter that reads the target's hidden states of every token (EAGLE,
    EAGLE-3, MTP; on vLLM <= 0.33, which does not say which, any drafter)
    and pooling read the other rows: then the whole step is gathered, as is a
    step whose sampled rows are most of it (decodes), and every step run
    from a CUDA graph captured whole (its gather is part of the graph).
    The other rows of the forward's output are left unwritten."""
    global _ROWS
    if (ulysses.sp_size() == 1 or runner.is_pooling_model
            or _reads_target_hidden_states(runner.speculative_config)
            or _asks_prompt_logprobs(runner, input_batch)):
        yield
        return
    _ROWS = logits_indices
    try:
        yield
    finally:
        _ROWS = None


def _reads_target_hidden_states(spec: Any) -> bool:
    """Whether the speculator reads the target's hidden states of the whole
    step: vLLM >= 0.34 says so per speculator config
    (``SpeculativeConfig.uses_target_hidden_states``; n-gram, suffix and a
    draft model read none); older releases do not, so any drafter does."""
    return spec is not None and getattr(spec, "uses_target_hidden_states", True)


def _asks_prompt_logprobs(runner: Any, input_batch: Any) -> bool:
    """Whether a request of the step wants prompt logprobs: V1 keeps those
    requests by id, V2 a flag per request slot."""
    if input_batch is None:
        return bool(runner.num_prompt_logprobs)
    worker = runner.prompt_logprobs_worker
    return worker is not None and bool(
        worker.uses_prompt_logprobs[input_batch.idx_mapping_np].any())


def _gather_output(out: torch.Tensor, total: int) -> torch.Tensor:
    """The forward's hidden states of the whole step from this rank's
    slice: every row, or only the sampled ones (``sampled_rows_only``)."""
    rows = _ROWS
    if (rows is None or rows.shape[0] * ulysses.sp_size() >= total
            or (out.is_cuda and torch.cuda.is_current_stream_capturing())):
        _GATHERS["whole"] += 1
        return ulysses.gather_tokens(out)
    _GATHERS["rows"] += 1
    whole = out.new_empty((total, *out.shape[1:]))
    whole[rows] = ulysses.gather_rows(out, rows)
    return whole


@contextmanager
def _dp_sizes_of_slices(divide: bool) -> Iterator[None]:
    """With data parallelism, MoE layers gather tokens over the DP group
    (the same SP rank of every replica) using each replica's token count
    from the forward context.  Inside the SP model a rank holds 1/SP of
    its replica's (padded) step, so the counts are divided for the call.
    With expert parallelism the layers split each replica's count over its
    TP*SP ranks themselves (``ulysses_moe``): the counts stay whole
    (``divide`` False)."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    dp = get_forward_context().dp_metadata if is_forward_context_available() else None
    if dp is None or not divide:
        yield
        return
    whole = dp.num_tokens_across_dp_cpu
    dp.num_tokens_across_dp_cpu = whole // ulysses.sp_size()
    try:
        yield
    finally:
        dp.num_tokens_across_dp_cpu = whole


def check_attention_layers(model: torch.nn.Module) -> None:
    """Every attention-like layer of the SP model must run through a plan
    (vLLM's ``Attention`` and the Gated-DeltaNet mixers make one when SP >
    1).  Without one, a layer class of a model's own (MiniMax-M3's
    block-sparse attention, Inkling's, DeepSeek-V4's) would attend over
    this rank's 1/SP of the tokens, and a state-keeping (Mamba-like) mixer
    whose hook is missing would run its recurrence on that slice: wrong
    outputs, silently.  The config checks cannot see layer classes, so the
    loaded model is checked."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    for name, module in model.named_modules():
        if isinstance(module, AttentionLayerBase) and getattr(module, "ulysses", None) is None:
            raise ValueError(f"sequence_parallel_size > 1: layer {name} "
                             f"({type(module).__name__}) attends without a sequence-parallel "
                             "exchange (SP serves vLLM's Attention, MLA, Gated-DeltaNet and "
                             "Mamba-2 layers); use -sp 1")


def shard_model_tokens(model: torch.nn.Module) -> torch.nn.Module:
    """Make ``model(input_ids, positions, ...)`` take the whole (padded) step
    and return hidden states for the whole step, while its layers see only
    this SP rank's slice of the tokens.

    Why here and not in each runner: the V1 and V2 runners, their dummy and
    profile runs and their CUDA-graph capture all call the model the same
    way, so one hook covers them all, and the hidden states they slice for
    logits or pooling are the full step's as upstream expects.  The runners
    only pad the step to a multiple of SP (``ulysses.pad_tokens``)."""
    if ulysses.sp_size() == 1:
        return model
    from vllm.sequence import IntermediateTensors

    check_attention_layers(model)
    from vllm.config import get_current_vllm_config

    divide_dp_sizes = not ulysses_moe.sequence_parallel_moe(
        get_current_vllm_config().parallel_config)
    inner = model.forward

    def forward(input_ids=None, positions=None, intermediate_tensors=None,
                inputs_embeds=None, **kwargs):
        total = positions.shape[-1]
        assert total % ulysses.sp_size() == 0, f"step of {total} tokens not padded to SP"
        if input_ids is not None:
            input_ids = ulysses.shard_tokens(input_ids)
        if inputs_embeds is not None:
            inputs_embeds = ulysses.shard_tokens(inputs_embeds)
        hidden = kwargs.get("hidden_states")
        if isinstance(hidden, torch.Tensor) and hidden.shape[0] == total:
            # A drafter's input (EAGLE, MTP): the target's hidden states,
            # one row per token of the step.
            kwargs["hidden_states"] = ulysses.shard_tokens(hidden)
        positions = ulysses.shard_tokens(positions, dim=positions.dim() - 1)
        if intermediate_tensors is not None:
            # (Passed only when given: a drafter's forward has no such argument.)
            kwargs["intermediate_tensors"] = IntermediateTensors(
                {k: ulysses.shard_tokens(v) for k, v in intermediate_tensors.tensors.items()})
        with _dp_sizes_of_slices(divide_dp_sizes):
            out = inner(input_ids=input_ids, positions=positions, inputs_embeds=inputs_embeds,
                        **kwargs)
        if isinstance(out, IntermediateTensors):
            return IntermediateTensors({k: ulysses.gather_tokens(v)
                                        for k, v in out.tensors.items()})
        if isinstance(out, tuple):  # (hidden, aux hidden states)
            return tuple(ulysses.gather_tokens(o) if isinstance(o, torch.Tensor) else
                         [ulysses.gather_tokens(a) for a in o] for o in out)
        return _gather_output(out, total)

    model.forward = forward
    ulysses_multimodal.slice_side_inputs(model)
    return model
