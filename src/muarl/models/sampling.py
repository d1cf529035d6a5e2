"""Drawing the next token of every row of a batch at once, each exactly from its own distribution.

Why one uniform number per row. ``torch.multinomial`` draws a single sample by the exponential trick: one
exponential random number for every entry of the vocabulary (49,152 for SmolLM2), about 0.8 ms a row on one
core. A decode step of 64 rows spent ~25-45 ms of its ~0.41 s on those draws, even spread over two threads
(docs/benchmarks.md, the roofline section). Inverse-CDF sampling draws from the same distribution with one
uniform number ``u`` per row: the token is the one whose interval ``[c[i-1], c[i])`` of the cumulative sums
``c`` holds ``u * c[-1]``. The softmax and the cumulative sums of the whole batch are one call each (~5 ms for
64 rows). The sums are float64, so that rounding moves no token's share by a measurable amount (in float32,
49,152 additions can move a boundary by more than a rare token's whole probability).

Each row draws with its own generator, one number per token, so a row's samples do not depend on the batch it
ran in, nor on the number of threads: sequential, shared-prefix and batched generation give the same ids
(``tests/models/test_batched_generation.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def sample_rows(logits: torch.Tensor, temperature: float, top_p: float,
                generators: Sequence[torch.Generator]) -> tuple[list[int], list[float]]:
    """(token ids, their log-probabilities under ``softmax(logits / temperature)``, before top-p truncation) for
    each row of ``logits`` ``[rows, vocabulary]``, row ``r`` drawn with ``generators[r]``. Temperature 0 takes
    each row's most likely token and draws nothing."""
    logits = logits.float()
    if temperature == 0:
        tokens = logits.argmax(-1)
        logprobs = torch.log_softmax(logits, dim=-1)
    else:
        logprobs = torch.log_softmax(logits / temperature if temperature != 1 else logits, dim=-1)  # x / 1 is x
        probs = logprobs.exp()
        if top_p < 1.0:
            probs = nucleus(probs, top_p)
        uniforms = torch.tensor([float(torch.rand((), generator=g, dtype=torch.float64)) for g in generators], dtype=torch.float64)
        tokens = inverse_cdf(probs.double().cumsum_(-1), uniforms)
    return tokens.tolist(), logprobs.gather(-1, tokens[:, None])[:, 0].tolist()


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` ``[rows, vocabulary]`` with each row cut to its smallest set of most likely tokens whose mass
    reaches ``top_p`` (the token that crosses it kept), the rest set to 0; not renormalised."""
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)
    keep = (ordered.cumsum(-1) - ordered) < top_p
    return torch.zeros_like(probs).scatter_(-1, order, ordered * keep)


def inverse_cdf(cdf: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose cumulative sum exceeds ``u * total`` (``u`` in [0, 1)): token ``i`` is taken
    with probability ``(cdf[i] - cdf[i-1]) / total``, so a token without mass never is. Where ``u * total`` rounds
    up to the total itself (``u`` within an ulp of 1) the row's last token with mass is taken."""
    totals = cdf[:, -1]
    tokens = torch.searchsorted(cdf, (uniforms * totals)[:, None], right=True)[:, 0]
    beyond = tokens >= cdf.shape[-1]
    if bool(beyond.any()):
        tokens = torch.where(beyond, cdf.argmax(-1), tokens)  # argmax: the first index reaching the total
    return tokens
