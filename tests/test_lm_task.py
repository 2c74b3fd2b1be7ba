"""stability/measure/lm_task.py against closed forms: the stationary distribution and entropy rate of
a two-state chain by hand, an order-2 chain against an independent eigenvector computation, the
uniform chain, sampling (empirical transition frequencies and the mean log-likelihood against the
entropy rate, within a stated number of standard errors) and bit-exact replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from stability.measure.lm_task import MarkovChain, markov_chain, row_entropies, state_matrix, stationary_distribution


def _h(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


@pytest.mark.parametrize(("a", "b"), [(0.1, 0.3), (0.5, 0.5), (0.02, 0.9)])
def test_the_two_state_chain_by_hand(a: float, b: float) -> None:
    """P = [[1 − a, a], [b, 1 − b]]: π = (b, a)/(a + b), H = π₀ h(a) + π₁ h(b), h the binary entropy."""
    chain = MarkovChain.from_rows(torch.tensor([[1 - a, a], [b, 1 - b]], dtype=torch.float64), order=1)
    pi = [b / (a + b), a / (a + b)]
    assert chain.stationary.tolist() == pytest.approx(pi, abs=1e-14)
    assert chain.entropy_rate() == pytest.approx(pi[0] * _h(a) + pi[1] * _h(b), abs=1e-14)


def test_a_periodic_chain_has_its_stationary_distribution() -> None:
    """0 → 1 → 0 deterministically: π = (1/2, 1/2), H = 0 (power iteration alone would oscillate)."""
    chain = MarkovChain.from_rows(torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64), order=1)
    assert chain.stationary.tolist() == [0.5, 0.5]
    assert chain.entropy_rate() == 0.0


def _numpy_stationary(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eig(m.T)
    x = np.real(v[:, np.argmin(np.abs(w - 1))])
    return x / x.sum()


@pytest.mark.parametrize(("vocab", "order"), [(3, 2), (4, 2), (2, 3)])
def test_an_order_k_chain_against_an_eigenvector(vocab: int, order: int) -> None:
    """π of the k-gram state chain against numpy's left eigenvector of eigenvalue 1 of the state
    matrix built by hand (state s = (x₁…x_k) → (x₂…x_k, x) with P(x | s)); H against Σ π H(row)."""
    chain = markov_chain(vocab=vocab, order=order, concentration=1.5, seed=3)
    n = vocab**order
    m = np.zeros((n, n))
    for s in range(n):
        for x in range(vocab):
            m[s, (s * vocab + x) % n] += float(chain.rows[s, x])
    assert state_matrix(chain.rows, vocab=vocab, order=order).numpy() == pytest.approx(m, abs=0.0)
    pi = _numpy_stationary(m)
    assert chain.stationary.numpy() == pytest.approx(pi, abs=1e-12)
    rows = chain.rows.numpy()
    assert chain.entropy_rate() == pytest.approx(float(-(pi[:, None] * rows * np.log(rows)).sum()), abs=1e-12)


def test_power_iteration_and_the_direct_solve_agree() -> None:
    chain = markov_chain(vocab=5, order=2, concentration=2.0, seed=1)
    direct = stationary_distribution(chain.rows, vocab=5, order=2)
    from stability.measure import lm_task

    old = lm_task._DIRECT_STATES
    lm_task._DIRECT_STATES = 0
    try:
        iterated = stationary_distribution(chain.rows, vocab=5, order=2)
    finally:
        lm_task._DIRECT_STATES = old
    assert iterated.tolist() == pytest.approx(direct.tolist(), abs=1e-12)


def test_concentration_zero_is_uniform_and_its_entropy_rate_is_log_v() -> None:
    chain = markov_chain(vocab=7, order=2, concentration=0.0, seed=0)
    assert torch.equal(chain.rows, torch.full((49, 7), 1 / 7, dtype=torch.float64))
    assert chain.entropy_rate() == pytest.approx(math.log(7), abs=1e-14)
    assert row_entropies(chain.rows).tolist() == pytest.approx([math.log(7)] * 49, abs=1e-14)


def test_higher_concentration_lowers_the_entropy_rate() -> None:
    rates = [markov_chain(vocab=16, order=1, concentration=c, seed=0).entropy_rate() for c in (0.5, 1.0, 2.0, 4.0)]
    assert rates == sorted(rates, reverse=True) and rates[0] < math.log(16)


def test_sampling_follows_the_rows_and_replays_bit_for_bit() -> None:
    chain = markov_chain(vocab=4, order=1, concentration=1.0, seed=2)
    tokens = chain.sample(4000, 26, torch.Generator().manual_seed(5))  # (N, L)
    assert torch.equal(tokens, chain.sample(4000, 26, torch.Generator().manual_seed(5)))
    assert not torch.equal(tokens, chain.sample(4000, 26, torch.Generator().manual_seed(6)))
    assert tokens.dtype == torch.int64 and tokens.min() >= 0 and tokens.max() < 4
    # the first token is a stationary draw: its frequency within 5 standard errors of π
    first = torch.bincount(tokens[:, 0], minlength=4).double() / 4000
    se = (chain.stationary * (1 - chain.stationary) / 4000).sqrt()
    assert ((first - chain.stationary).abs() < 5 * se).all()
    # every transition's empirical frequency within 5 standard errors of its row
    prev, nxt = tokens[:, :-1].flatten(), tokens[:, 1:].flatten()
    for s in range(4):
        seen = nxt[prev == s]
        freq = torch.bincount(seen, minlength=4).double() / len(seen)
        se = (chain.rows[s] * (1 - chain.rows[s]) / len(seen)).sqrt()
        assert ((freq - chain.rows[s]).abs() < 5 * se).all(), (s, freq, chain.rows[s])


def test_the_chains_own_loss_on_a_sample_estimates_the_entropy_rate() -> None:
    """−mean log P(x_t | context) over stationary sequences → H; within 5 standard errors (the
    per-token log-likelihoods of one sequence are correlated, so the error is taken over sequences)."""
    chain = markov_chain(vocab=6, order=2, concentration=1.5, seed=4)
    tokens = chain.sample(3000, 30, torch.Generator().manual_seed(0))
    ll = chain.log_likelihood(tokens)  # (N, L − k)
    assert ll.shape == (3000, 28)
    per_seq = -ll.mean(dim=1)
    se = float(per_seq.std()) / math.sqrt(3000)
    assert abs(float(per_seq.mean()) - chain.entropy_rate()) < 5 * se


def test_log_likelihood_reads_the_right_row() -> None:
    rows = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)
    chain = MarkovChain.from_rows(rows, order=1)
    tokens = torch.tensor([[0, 1, 1, 2, 0]])
    expected = [math.log(0.25), math.log(0.8), math.log(0.1), math.log(0.2)]
    assert chain.log_likelihood(tokens)[0].tolist() == pytest.approx(expected, abs=1e-15)


def test_a_chain_with_too_many_states_or_rows_of_the_wrong_count_is_refused() -> None:
    with pytest.raises(ValueError, match="states, more than"):
        markov_chain(vocab=512, order=2, concentration=1.0, seed=0)
    with pytest.raises(ValueError, match="has 9 rows, not 3"):
        MarkovChain.from_rows(torch.full((3, 3), 1 / 3), order=2)
