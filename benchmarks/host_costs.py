#!/usr/bin/env python3
"""Per-request host work that grows with the prompt and no GPU count shrinks,
timed alone on the CPU: tokenizing the prompt (the benchmark's word-level
tokenizer, in the API server), hashing its KV blocks for the prefix cache
(the engine core), and the first token's detokenization (vLLM 0.26 primes a
tokenizers DecodeStream with the whole prompt, and its first step decodes
all of it, twice, on the API server's event loop).  One H200 served ~35 ms
of TP=1's 8k TTFT outside the engine's prefill
(benchmarks/results/2026-11-24-1gpu-sp1-ttft-split/); this says how much of
it these three are.

    python3 benchmarks/run.py setup --shape 8b          # the tokenizer (BENCH_DIR)
    python3 benchmarks/host_costs.py [--model DIR]      # medians of 5, ms
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path


def median_ms(f, n: int = 5) -> float:
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        xs.append(1e3 * (time.perf_counter() - t))
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model",
                    default=str(Path(os.environ.get("BENCH_DIR", "/root/bench")) / "models" / "8b"))
    ap.add_argument("--lengths", default="1024,8192,32768")
    a = ap.parse_args()
    from tokenizers.decoders import DecodeStream
    from vllm.tokenizers import get_tokenizer
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils as ku

    tok = get_tokenizer(a.model)
    hash_fn = get_hash_fn_by_name("sha256")      # vLLM 0.26's default prefix_caching_hash_algo
    ku.init_none_hash(hash_fn)
    rng = random.Random(0)
    print("| prompt tokens | tokenize (ms) | block hashes, sha256 (ms) "
          "| first token's detokenization (ms) |\n| --- | --- | --- | --- |")
    for n in map(int, a.lengths.split(",")):
        ids = [rng.randrange(1000, len(tok) - 1000) for _ in range(n)]
        text = tok.decode(ids)

        def hash_blocks():
            parent = None
            for i in range(0, n - n % 16, 16):
                parent = ku.hash_block_tokens(hash_fn, parent, ids[i:i + 16], None)

        def first_step():      # as vLLM's FastIncrementalDetokenizer does it
            DecodeStream(ids=ids, skip_special_tokens=True).step(tok._tokenizer, ids[0])
        print(f"| {n} | {median_ms(lambda: tok(text)['input_ids']):.1f} "
              f"| {median_ms(hash_blocks):.1f} | {median_ms(first_step):.1f} |")


if __name__ == "__main__":
    main()
