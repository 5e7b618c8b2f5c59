# SPDX-License-Identifier: Apache-2.0
"""Multimodal checkpoints under Ulysses SP: which classes serve, and why
those.

Why most need nothing: the model runner runs the vision encoder and merges
its embeddings into the step's input embeddings before the language model
is called, the same on every rank (the encoder is TP-sharded as upstream
runs it; SP ranks each compute it whole).  ``ulysses_model.shard_model_tokens``
then slices ``inputs_embeds`` and the positions (M-RoPE's ``[3, n]``
included) like ``input_ids``, and the decoder is one SP already splits.
Attention masks that depend on the image spans (Gemma 3's bidirectional
image tokens) are built for the whole step, which the exchanged attention
sees.

Why an allowlist and not every multimodal class: a language model that
reads any other per-token input beside the embeddings would read the whole
step's rows on a rank that holds a slice of it.  Qwen3-VL's deepstack
features, for example, are added to early layers' hidden states from a
buffer indexed by token, so SP rank 1 would add rank 0's features
(``slice_side_inputs`` gives each rank its rows).  Other such classes stay
refused, by name, until their side inputs are sliced, and a class joins the
list when an engine test shows it equal to TP=1 (text and image prompts) or
its decoder and vision path are those of one that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm.distributed import ulysses

if TYPE_CHECKING:
    import torch
    from vllm.config import ModelConfig

# Class -> the test or class that shows it (tests/test_e2e_families.py).
SP_MULTIMODAL = {
    "Gemma3ForConditionalGeneration": "test_e2e_families.py::gemma3_vl",
    "Qwen2_5_VLForConditionalGeneration": "test_e2e_families.py::qwen2_5_vl",
    # Qwen2.5-VL's decoder (Qwen2, M-RoPE) and merge with an older vision tower.
    "Qwen2VLForConditionalGeneration": "Qwen2_5_VLForConditionalGeneration",
    # Deepstack side inputs sliced (slice_side_inputs).
    "Qwen3VLForConditionalGeneration": "test_e2e_families.py::qwen3_vl",
    "Qwen3VLMoeForConditionalGeneration": "Qwen3VLForConditionalGeneration",
    # Gated-DeltaNet hybrid decoders (ulysses_gdn.py) under the same merge.
    "Qwen3_5ForConditionalGeneration": "test_e2e_families.py::qwen3_5_vl",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForConditionalGeneration",
    # Text prompts tested; images reach the decoder as Gemma 3's do (merged
    # embeddings only), but vLLM's CPU engine cannot run its vision tower.
    "Llama4ForConditionalGeneration": "test_e2e_families.py::llama4_vl (text)",
}


def verify_multimodal(mc: ModelConfig) -> None:
    """One-line refusal of a multimodal class SP has not been shown to
    serve; the fix names the way out."""
    if mc.architecture in SP_MULTIMODAL:
        return
    raise ValueError(
        f"sequence_parallel_size > 1 does not support the multimodal {mc.architecture} yet "
        f"(supported: {', '.join(sorted(SP_MULTIMODAL))}); use -sp 1")


def slice_side_inputs(model: torch.nn.Module) -> None:
    """Qwen3-VL (and its MoE sibling) keep per-token deepstack features in
    a buffer that ``embed_input_ids`` fills for the whole step; the model's
    forward reads and then zeroes the first ``n`` rows, ``n`` being the
    rows of the embeddings it was given -- under SP this rank's slice.  Read
    the whole step's rows and keep this rank's, and zero them all.  The
    originals stay on the model for Shift's full-TP model
    (``share_side_inputs``)."""
    get = getattr(model, "_get_deepstack_input_embeds", None)
    if get is None:
        return
    from vllm.sequence import IntermediateTensors

    clear, sp = model._clear_deepstack_input_embeds, ulysses.sp_size()
    model._ulysses_side_inputs = (get, clear)

    def my_rows(num_tokens: int) -> IntermediateTensors | None:
        whole = get(num_tokens * sp)
        if whole is None:
            return None
        return IntermediateTensors({k: ulysses.shard_tokens(v) for k, v in whole.tensors.items()})

    model._get_deepstack_input_embeds = my_rows
    model._clear_deepstack_input_embeds = lambda num_tokens: clear(num_tokens * sp)


def share_side_inputs(sp_model: torch.nn.Module, full: torch.nn.Module) -> None:
    """Shift: the runner merges images through the SP model, whose buffer
    then holds the step's deepstack features; a step the full-TP model
    serves must read (and clear) that buffer, not its own empty one."""
    side = getattr(sp_model, "_ulysses_side_inputs", None)
    if side is not None:
        full._get_deepstack_input_embeds, full._clear_deepstack_input_embeds = side
