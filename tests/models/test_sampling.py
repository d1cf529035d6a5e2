"""The batched token draw: inverse-CDF sampling with one uniform number per row (``muarl.models.sampling``)."""

from __future__ import annotations

import math

import torch

from muarl.models.sampling import inverse_cdf, nucleus, sample_rows


def test_inverse_cdf_takes_the_interval_holding_u_and_never_a_token_without_mass():
    # probabilities 0.5, 0, 0.25, 0.25, 0: cumulative sums 0.5, 0.5, 0.75, 1, 1 (exact in binary)
    cdf = torch.tensor([[0.5, 0.5, 0.75, 1.0, 1.0]], dtype=torch.float64)
    cases = {0.0: 0, 0.4999: 0, 0.5: 2, 0.7499: 2, 0.75: 3, 1 - 2**-53: 3}  # u: token (0.5 lies on token 1's empty interval)
    for u, token in cases.items():
        assert inverse_cdf(cdf, torch.tensor([u], dtype=torch.float64)).tolist() == [token], u
    # u * total rounding up to the total: the last token with mass, not the massless one after it (nor past the end)
    assert inverse_cdf(cdf, torch.tensor([1.0], dtype=torch.float64)).tolist() == [3]


def test_inverse_cdf_scales_u_by_each_rows_total():
    cdf = torch.tensor([[0.25, 0.5], [0.125, 0.25]], dtype=torch.float64)  # a truncated row sums to less than 1
    assert inverse_cdf(cdf, torch.tensor([0.6, 0.6], dtype=torch.float64)).tolist() == [1, 1]
    assert inverse_cdf(cdf, torch.tensor([0.4, 0.4], dtype=torch.float64)).tolist() == [0, 0]


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3], [0.25, 0.25, 0.25, 0.25]])
    kept = nucleus(probs, 0.7)
    assert kept[0].tolist() == [0.0, 0.5, 0.0, 0.30000001192092896]  # 0.5 < 0.7, so 0.3 is kept; 0.8 >= 0.7, so 0.15 is not
    assert (kept[1] > 0).sum() == 3  # ties: 0.5 < 0.7 after two, so a third is kept, and only one


def test_sample_rows_draws_from_the_distribution():
    probs = [0.5, 0.3, 0.15, 0.05]
    logits = torch.log(torch.tensor(probs)).expand(200, 4)
    generators = [torch.Generator().manual_seed(r) for r in range(200)]
    counts = [0] * 4
    for _ in range(100):
        tokens, logprobs = sample_rows(logits, 1.0, 1.0, generators)
        for token, logprob in zip(tokens, logprobs):
            counts[token] += 1
            assert math.isclose(logprob, math.log(probs[token]), rel_tol=1e-5)
    n = sum(counts)
    for count, p in zip(counts, probs):  # within 4 standard deviations of n * p, for each token
        assert abs(count - n * p) < 4 * math.sqrt(n * p * (1 - p)), counts


def test_temperature_and_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))[None]
    generator = torch.Generator().manual_seed(0)
    assert {sample_rows(logits, 1.0, 0.7, [generator])[0][0] for _ in range(200)} == {0, 1}
    # the log-probability is the temperature-scaled one before truncation: at T = 2, proportional to 1 and sqrt(3)
    token, logprob = (x[0] for x in sample_rows(torch.tensor([[0.0, math.log(3.0)]]), 2.0, 1.0, [generator]))
    assert math.isclose(logprob, math.log([1, 3**0.5][token] / (1 + 3**0.5)), rel_tol=1e-5)


def test_greedy_takes_the_most_likely_token_and_draws_nothing():
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    tokens, logprobs = sample_rows(torch.log(torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])), 0.0, 1.0, [generator, generator])
    assert tokens == [1, 0] and math.isclose(logprobs[0], math.log(0.5), rel_tol=1e-5)
    assert torch.equal(generator.get_state(), state)


def test_a_rows_draws_do_not_depend_on_the_batch_it_is_drawn_in():
    """Each row draws one number from its own generator per token: alone or among 15 others, the same tokens."""
    logits = torch.randn(16, 1000, generator=torch.Generator().manual_seed(0)) * 2
    together = [torch.Generator().manual_seed(100 + r) for r in range(16)]
    alone = [torch.Generator().manual_seed(100 + r) for r in range(16)]
    for top_p in (1.0, 0.9):
        for _ in range(20):
            batch = sample_rows(logits, 1.0, top_p, together)
            rows = [sample_rows(logits[r:r + 1], 1.0, top_p, [alone[r]]) for r in range(16)]
            assert batch[0] == [row[0][0] for row in rows]
            assert batch[1] == [row[1][0] for row in rows]
