"""How much of a prompt the detokenizer needs to stream its first tokens.

vLLM 0.26 primes each request's ``tokenizers.DecodeStream`` with the whole
prompt, and the stream's first ``step()`` decodes everything it was primed
with, twice, on the API server's event loop: O(prompt) on the first token of
every request (65 ms at 32k tokens on a 2-core CPU; ~21 ms of an 8k TTFT on
the H200 host's frontend, benchmarks/results/2026-11-24-1gpu-sp1-ttft-split/).  That is host
time no GPU count shrinks, so it eats the long-prompt TTFT that sequence
parallelism buys.

A token's text depends on few tokens before it (a character split over byte
tokens, a WordPiece "##", a stripped leading space, skipped special tokens),
so a short tail of the prompt primes the stream as well as all of it -- when
the tail's text starts clean: not empty, not inside a character, and exactly
the end of the text of a tail twice as long.  Otherwise the tail doubles, up
to LONGEST_TAIL tokens, and then the whole prompt is used (upstream's
behaviour; the tries decode at most 3 x (32 + 64 + ... + 1024) = 6048
tokens, the cost of priming with a 3k-token prompt).
"""

from __future__ import annotations

from collections.abc import Sequence

PROMPT_TAIL_TOKENS = 32
LONGEST_TAIL = 1024


def prompt_tail(tokenizer, ids: Sequence[int] | None, skip_special_tokens: bool):
    """The ids to prime a DecodeStream with: a tail of ``ids`` whose text
    does not depend on what precedes it, else all of ``ids``."""
    n = PROMPT_TAIL_TOKENS
    while ids is not None and n < len(ids) and n <= LONGEST_TAIL:
        tail = tokenizer.decode(ids[-n:], skip_special_tokens=skip_special_tokens)
        longer = tokenizer.decode(ids[-2 * n:], skip_special_tokens=skip_special_tokens)
        if tail and not tail.startswith("\ufffd") and longer.endswith(tail):
            return list(ids[-n:])
        n *= 2
    return ids
