"""Stage 4 (training): the language-model run's token task, a seeded order-k Markov chain whose
best achievable loss is known in closed form.

Over a vocabulary of V tokens, the next token depends on the last k: its distribution is row s of
`rows`, s = the k-gram state (the last k tokens, oldest first, read as a base-V number). Each row
is softmax(c·g), g ~ N(0, I_V) drawn from the chain's seed, so the *concentration* c sets how
predictable the chain is: c = 0 is uniform (every row's entropy is log V), a large c puts almost
all of a row's mass on one token.

The best any model can do, predicting token t from all earlier ones, is the chain's own rows, and
its expected cross-entropy per scored token is the entropy rate

    H = Σ_s π(s) · H(P(·|s)),    H(p) = −Σ_x p(x) log p(x),

π the stationary distribution of the k-gram state chain (s₁…s_k) → (s₂…s_k, x). Sequences start
in π (their first k tokens are a stationary state), so every token at position ≥ k has exactly
that expected optimal loss; the first k positions lack a full context and are not scored
(`stability.measure.lm_train`). Everything is drawn from `torch.Generator`s in float64 on the
CPU, so a seed replays bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from stability.spec.lm_keys import MAX_STATES

__all__ = ["MarkovChain", "markov_chain", "stationary_distribution", "state_matrix", "row_entropies", "MAX_STATES"]


def row_entropies(rows: torch.Tensor) -> torch.Tensor:
    """(S, V) → (S,) float64: H(P(·|s)) = −Σ_x p log p in nats, with 0·log 0 = 0."""
    out: torch.Tensor = torch.special.entr(rows.double()).sum(dim=1)
    return out


#: Chains with at most this many states get π by a direct linear solve; larger ones by power iteration.
_DIRECT_STATES = 1024
#: Power-iteration steps of the chain itself before it turns lazy (which converges also when the chain is periodic).
_PLAIN_STEPS = 2000


def state_matrix(rows: torch.Tensor, *, vocab: int, order: int) -> torch.Tensor:
    """(S, S) float64, S = V^k: M[s, s'] = P(s → s'), the k-gram state s = (s₁…s_k) moving to
    s' = (s₂…s_k, x) with probability P(x | s)."""
    n = vocab**order
    m = torch.zeros(n, n, dtype=torch.float64)
    nxt = (torch.arange(n)[:, None] * vocab + torch.arange(vocab)[None, :]) % n  # (S, V): the state after token x
    m.scatter_add_(1, nxt, rows.double())
    return m


def stationary_distribution(
    rows: torch.Tensor, *, vocab: int, order: int, tol: float = 1e-13, max_iter: int = 200_000
) -> torch.Tensor:
    """π over the V^k states of the k-gram chain, πM = π with Σπ = 1 (M = `state_matrix`), in
    float64: by a direct solve of Mᵀπ = π with one equation replaced by Σπ = 1 for up to 1024 states,
    else by power iteration (of the lazy chain (M + I)/2 after 2000 steps: same π, never periodic) until
    ‖π' − π‖₁ ≤ tol. Raises ValueError when π is not found to 1e-10 (a chain that mixes too slowly)."""
    n = vocab**order
    p = rows.double()
    if n <= _DIRECT_STATES:
        m = state_matrix(p, vocab=vocab, order=order)
        a = m.t() - torch.eye(n, dtype=torch.float64)
        a[-1] = 1.0
        b = torch.zeros(n, dtype=torch.float64)
        b[-1] = 1.0
        pi: torch.Tensor = torch.linalg.solve(a, b).clamp_min(0.0)
        pi = pi / pi.sum()
        residual = float((pi @ m - pi).abs().sum())
    else:
        shape = (vocab,) * order
        pk = p.reshape(*shape, vocab)  # (V, …, V, V): P[s₁, …, s_k, x]
        cur = torch.full(shape, 1.0 / n, dtype=torch.float64)
        residual = math.inf
        for i in range(max_iter):
            step = (cur.unsqueeze(-1) * pk).sum(dim=0)  # (V, …, V): the state (s₂…s_k, x)
            residual = float((step - cur).abs().sum())
            if residual <= tol:
                break
            cur = step if i < _PLAIN_STEPS else 0.5 * (cur + step)  # lazy once plain steps have not converged
        pi = cur.reshape(-1) / cur.sum()
    if not residual <= 1e-10:
        raise ValueError(
            f"the order-{order} chain over {vocab} tokens mixes too slowly for its stationary distribution to "
            f"be found (residual {residual:.2g}); lower the concentration"
        )
    return pi


@dataclass(frozen=True)
class MarkovChain:
    """An order-k Markov chain over `vocab` tokens: rows[s] = P(· | state s), (V^k, V) float64;
    stationary[s] = π(s), (V^k,) float64."""

    vocab: int
    order: int
    rows: torch.Tensor
    stationary: torch.Tensor

    @classmethod
    def from_rows(cls, rows: torch.Tensor, *, order: int) -> MarkovChain:
        """A chain from its transition rows (each row a distribution); π by `stationary_distribution`."""
        vocab = rows.shape[1]
        if rows.shape[0] != vocab**order:
            raise ValueError(f"an order-{order} chain over {vocab} tokens has {vocab**order} rows, not {rows.shape[0]}")
        rows = rows.double()
        return cls(vocab, order, rows, stationary_distribution(rows, vocab=vocab, order=order))

    def entropy_rate(self) -> float:
        """H = Σ_s π(s) H(P(·|s)) in nats per token: the expected loss of the best predictor."""
        return float((self.stationary * row_entropies(self.rows)).sum())

    def state_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """(…, k) tokens (oldest first) → (…,) state indices Σ_i x_i V^(k−1−i)."""
        weights = self.vocab ** torch.arange(self.order - 1, -1, -1, device=tokens.device)  # (k,)
        return (tokens * weights).sum(dim=-1)

    def sample(self, sequences: int, length: int, gen: torch.Generator) -> torch.Tensor:
        """(sequences, length) int64 tokens: the first k a stationary state, then each token from
        its row, by inverse-CDF sampling of float64 uniforms from `gen` (one draw per sequence for
        the start, then one per token)."""
        k, v = self.order, self.vocab
        start = (
            torch.searchsorted(self.stationary.cumsum(0), torch.rand(sequences, 1, generator=gen, dtype=torch.float64))
            .clamp(max=v**k - 1)
            .squeeze(1)
        )  # (N,)
        digits = [(start // v ** (k - 1 - i)) % v for i in range(k)]  # k × (N,)
        out = torch.empty(sequences, max(length, k), dtype=torch.int64)
        for i, d in enumerate(digits):
            out[:, i] = d
        cdf = self.rows.cumsum(1)  # (S, V)
        state = start
        for t in range(k, length):
            u = torch.rand(sequences, 1, generator=gen, dtype=torch.float64)  # (N, 1)
            x = torch.searchsorted(cdf[state], u).clamp(max=v - 1).squeeze(1)  # (N,)
            out[:, t] = x
            state = (state * v + x) % v**k
        return out[:, :length]

    def log_likelihood(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) tokens → (N, L − k) float64: log P(x_t | x_{t−k} … x_{t−1}) for t = k … L − 1."""
        k = self.order
        context = tokens.unfold(1, k, 1)[:, :-1]  # (N, L − k, k): the k tokens before each scored one
        state = self.state_of(context)  # (N, L − k)
        return self.rows[state, tokens[:, k:]].log()  # (N, L − k)


def markov_chain(*, vocab: int, order: int, concentration: float, seed: int) -> MarkovChain:
    """The chain of a seed: rows softmax(c·g), g ~ N(0, I) in float64 from `torch.Generator(seed)`."""
    if vocab**order > MAX_STATES:
        raise ValueError(
            f"an order-{order} chain over {vocab} tokens has {vocab**order} states, more than {MAX_STATES}"
        )
    if not math.isfinite(concentration) or concentration < 0:
        raise ValueError(f"the concentration must be a finite number ≥ 0 (got {concentration})")
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(vocab**order, vocab, generator=gen, dtype=torch.float64)  # (S, V)
    return MarkovChain.from_rows(torch.softmax(concentration * g, dim=1), order=order)
