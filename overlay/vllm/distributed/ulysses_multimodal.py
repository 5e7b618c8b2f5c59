# SPDX-License-Identifier: Apache-2.0
"""Multimodal checkpoints under Ulysses SP: which classes serve, and why
those.

Why most need nothing: the model runner runs the vision encoder and merges
its embeddings into the step's input embeddings before the language model
is called, the same on every rank (the encoder is TP-sharded as upstream
runs it; SP ranks each compute it whole).  ``ulysses.shard_model_tokens``
then slices ``inputs_embeds`` and the positions (M-RoPE's ``[3, n]``
included) like ``input_ids``, and the decoder is one SP already splits.
Attention masks that depend on the image spans (Gemma 3's bidirectional
image tokens) are built for the whole step, which the exchanged attention
sees.

Why an allowlist and not every multimodal class: a language model that
reads any other per-token input beside the embeddings would read the whole
step's rows on a rank that holds a slice of it.  Qwen3-VL's deepstack
features, for example, are added to early layers' hidden states from a
buffer indexed by token, so SP rank 1 would add rank 0's features.  Such
classes stay refused, by name, until their side inputs are sliced, and a
class joins the list when an engine test shows it equal to TP=1 (text and
image prompts) or its decoder and vision path are those of one that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.config import ModelConfig

# Class -> the test or class that shows it (tests/test_e2e_families.py).
SP_MULTIMODAL = {
    "Gemma3ForConditionalGeneration": "test_e2e_families.py::gemma3_vl",
    "Qwen2_5_VLForConditionalGeneration": "test_e2e_families.py::qwen2_5_vl",
    # Qwen2.5-VL's decoder (Qwen2, M-RoPE) and merge with an older vision tower.
    "Qwen2VLForConditionalGeneration": "Qwen2_5_VLForConditionalGeneration",
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
