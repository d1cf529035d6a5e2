"""One layer's decode attention at the roofline bench's shape, two ways: torch's CPU flash kernel (what
``muarl.models.prefix_attention`` calls) against plain batched matmuls with a float32 softmax.

Two parts, as the engine splits them (bf16, SmolLM2-135M's heads: 3 key-value heads of 64, 3 query heads each):
each row's own attention, 64 rows x 3 queries over ~300 keys with an additive mask; and the shared prefix's, the
64 rows folded into one query block of 192 per key head over 2,500 keys. Medians of ``--repeats`` timings of
``--calls`` calls each, in milliseconds per call (a step makes 30 of each). Which way is cheaper tells where the
decode step's attention time can come down (docs/benchmarks.md, the roofline section). The two are not the same
arithmetic: a CPU ``matmul`` of bf16 operands returns bf16, so the matmul path's scores are rounded to bf16 before
its float32 softmax, where the flash kernel keeps them in float32.

    python bench/attention_kernels.py [--threads 2] [--rows 64] [--prefix 2500] [--suffix 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

KV_HEADS, GROUP, HEAD_DIM = 3, 3, 64
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def per_call_ms(fn: Callable[[], object], calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(times)


def matmul_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                     scale: float) -> torch.Tensor:
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores + mask.float()
    return torch.matmul(scores.softmax(-1).to(value.dtype), value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--prefix", type=int, default=2500)
    p.add_argument("--suffix", type=int, default=300)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    bf16, scale = torch.bfloat16, HEAD_DIM ** -0.5
    g = torch.Generator().manual_seed(0)
    query = torch.randn(args.rows, KV_HEADS, GROUP, HEAD_DIM, generator=g).to(bf16)
    own_k, own_v = (torch.randn(args.rows, KV_HEADS, args.suffix, HEAD_DIM, generator=g).to(bf16) for _ in range(2))
    mask = torch.zeros(args.rows, 1, GROUP, args.suffix, dtype=bf16)
    mask[0, :, :, : args.suffix // 4] = float("-inf")  # a shorter row's left padding
    pre_k, pre_v = (torch.randn(1, KV_HEADS, args.prefix, HEAD_DIM, generator=g).to(bf16) for _ in range(2))
    folded = query.transpose(0, 1).reshape(1, KV_HEADS, args.rows * GROUP, HEAD_DIM)
    with torch.inference_mode():
        result = {
            "own, flash kernel": per_call_ms(lambda: FLASH(query, own_k, own_v, 0.0, False, attn_mask=mask, scale=scale), args.calls, args.repeats),
            "own, matmuls": per_call_ms(lambda: matmul_attention(query, own_k, own_v, mask, scale), args.calls, args.repeats),
            "prefix, flash kernel": per_call_ms(lambda: FLASH(folded, pre_k, pre_v, 0.0, False, scale=scale), args.calls, args.repeats),
            "prefix, matmuls": per_call_ms(lambda: matmul_attention(folded, pre_k, pre_v, None, scale), args.calls, args.repeats),
        }
    print(json.dumps({"threads": args.threads, "rows": args.rows, "prefix": args.prefix, "suffix": args.suffix,
                      "ms_per_call": {k: round(v, 3) for k, v in result.items()}}, indent=1))


if __name__ == "__main__":
    main()
