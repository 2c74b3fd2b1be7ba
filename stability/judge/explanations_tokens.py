"""The explanations of the token and per-block invariants (`stability.judge.token_invariants`):
rank_collapse, attention_entropy and gradient_balance (stability.judge.explanations).
"""

from __future__ import annotations

from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["TOKEN_EXPLANATIONS"]

TOKEN_EXPLANATIONS: dict[str, Explanation] = {
    "rank_collapse": Explanation(
        summary="the output tokens have not collapsed toward one direction (rank collapse)",
        computes="""\
Token inputs only: at every boundary h of shape (B, T, C) the probe takes the mean pairwise cosine
similarity of the T token vectors of each sequence and averages it over the batch. With unit
vectors u_i = h_i / ‖h_i‖ and s = Σ_i u_i,

    mean over i ≠ j of u_i · u_j  =  (‖s‖² − Σ_i ‖u_i‖²) / (T (T − 1)),

O(T·C) per sequence instead of the T×T Gram matrix (a zero token counts as similarity 0). It is
1 when all tokens point the same way (rank one) and about 0 for independent random tokens. The
invariant judges the output boundary: similarity ≤ max_similarity (default 0.9), or no higher
than the input's own (a few random tokens can be similar by chance, and an identity block passes
them on: that is not a collapse); the message names the first block after which the similarity is
above the bound.""",
        fails="""\
- Attention without skip connections: each softmax attention averages the tokens, and pure
  attention loses rank doubly exponentially with depth (Dong et al. 2021).
- Skips whose branch is much larger than the route around (unscaled post-norm stacks, large
  branch gains) let the averaging win over the depth (Noci et al. 2022).
- Near-uniform attention (tiny query/key weights) averages all tokens at every block.""",
        fixes="""\
- Keep the skip connection: block.skip = "identity" (the default).
- Scale the branches down: block.residual = "deepnorm", "gpt2", "layerscale" or "rezero", or
  pre-norm blocks (block.norm_position = "pre").
- Keep the MLP sublayer (block.mlp = true): it counteracts the collapse per token.""",
        references=refs("rank", "signal", "layernorm"),
    ),
    "attention_entropy": Explanation(
        summary="no attention head has collapsed onto a few keys (entropy collapse)",
        computes="""\
For every attention module (the transformer family, or a custom block that computes its
probabilities with stability.families.transformer.AttentionProbs), the Shannon entropy of each attention
row, H_i = −Σ_j p_ij log p_ij, divided by its largest possible value log n_i: n_i = T keys, or
n_i = i + 1 for row i of a causal attention (rows with one key are left out). Averaged over the
batch and the rows, per head; a block's value is its lowest head's:

    e = min over blocks and heads of mean_i H_i / log n_i,   which must satisfy  e ≥ min_entropy

Uniform attention gives 1, attention on a single key gives 0 (default min_entropy 0.5).""",
        fails="""\
- Large query/key weights: the logits q·k/sqrt(d) spread widely and the softmax saturates on one
  key per row (Zhai et al. 2023 tie this to training instability).
- A large-variance residual stream fed to the attention unnormalised (post-norm stacks without a
  norm on the input of the attention, or norm = "none").
- Causal attention always has low entropy in its first rows; the normalisation by log(i + 1)
  accounts for that.""",
        fixes="""\
- Normalise the attention input: block.norm_position = "pre" or "sandwich" with norm = "layer".
- Smaller query/key init (space.weight_init = ["xavier_normal"] or "normal" with a small init_std).
- If your model is meant to attend sharply, lower min_entropy in the spec.""",
        references=refs("entropy", "layernorm"),
    ),
    "gradient_balance": Explanation(
        summary="every block's parameters receive a gradient of similar size (no layer starves)",
        computes="""\
From the same backward pass: for every block l the norm of the gradient of all its parameters,
G_l = sqrt(Σ over its parameters of ‖∂L/∂θ‖²) (blocks without parameters are left out). The
invariant judges the spread

    spread = max_l G_l / min_l G_l,   which must satisfy  spread ≤ max_spread

(default 10). A block whose parameters receive exactly zero gradient gives an infinite spread.
The message names the blocks with the largest and the smallest norm.""",
        fails="""\
- Post-norm transformers (norm after the addition): the gradient of the parameters near the
  output is large and shrinks toward the input, by a factor that grows with depth (Xiong et al.
  2020, Fig. 3); this is what makes post-norm need a learning-rate warm-up.
- A plain stack whose gradient vanishes or explodes (see gradient_arrival).
- Zero-initialised gains (ReZero, SkipInit) starve the branch weights at initialisation: only
  the gain itself receives a gradient, so the spread reflects the gain, not the branch.""",
        fixes="""\
- Pre-norm blocks (block.norm_position = "pre"): the gradient is the same order at every block.
- DeepNorm (block.residual = "deepnorm", Wang et al. 2022) keeps post-norm but up-weights the
  skip by (2N)^(1/4) and down-scales the branch init by (8N)^(-1/4).
- If the spread is inherent to your model, raise max_spread in the spec.""",
        references=refs("layernorm", "deepnet", "layerscale"),
    ),
}
