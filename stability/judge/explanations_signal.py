"""The explanations of the invariants judged on what the probe measures along the stack
(`stability.judge.invariants`, `stability.judge.stream`): gradient_arrival, variance_growth,
identity_at_init, residual_stream and mean_shift (stability.judge.explanations).
"""

from __future__ import annotations

from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["SIGNAL_EXPLANATIONS"]

SIGNAL_EXPLANATIONS: dict[str, Explanation] = {
    "gradient_arrival": Explanation(
        summary="the gradient at the output still reaches the input, neither vanished nor exploded",
        computes="""\
One forward and one backward pass of the loss L = sum(y * r), r ~ N(0, 1) drawn from the case's
seed (probe.loss = "sum" uses L = sum(y)). At every block boundary l (boundary l is the input of
block l, boundary L the output of the stack) the probe records g_l = ‖∂L/∂x_l‖. The invariant
judges the arrival ratio

    r = g_0 / g_L = ‖∂L/∂x_0‖ / ‖∂L/∂x_L‖,   which must satisfy  lo ≤ r ≤ hi

(defaults lo = 0.1, hi = 10, set in the spec's expect.gradient_arrival table). A gradient
that is exactly zero, underflows, or turns NaN/inf is a collapse and always fails. The message
names the first block (from the output down) where the running ratio g_l / g_L leaves the band,
and the average factor per block, r^(1/L). In the HTML report this is the left end of each line in the
"gradient arrival" plot.

On a pre-norm stack (the norm inside the branch, the stream the bare sum) whose x_0 is the model's
own token embedding, the ratio is r = g_1 / g_L, from block 0's output, and the entry factor
g_0 / g_1 is reported beside it, not bounded: the stream enters block 0 at the embedding's scale
(0.02 rms in GPT-2 and Llama) and block 0's norms multiply the gradient at x_0 by about 1/rms(x_0),
a property of the embedding's init, not of the stack (residual_stream bounds it where it belongs).
include_entry = true bounds g_0 / g_L there too; include_entry = false leaves block 0's input out
on any model. Both are detected from the model during the probe (stability.measure.block_form).""",
        fails="""\
- A plain stack multiplies one Jacobian per block: factors of 0.9 leave 0.9^50 ≈ 0.005 of the
  gradient after 50 blocks, and 1.1 per block explodes the same way.
- Saturating activations: the sigmoid's slope is at most 1/4, so with unit-gain weights a
  sigmoid stack loses about a factor 4 per block; tanh near saturation is no better.
- The wrong init for the activation: Xavier/Glorot (variance 1/fan_avg) under ReLU halves the
  signal every layer; He (2/fan_in) under tanh or identity doubles it.
- Something on the route around: a norm or a ReLU after the addition (post-norm, the original
  ResNet ordering), a fixed skip scale λ < 1 (λ^L over L blocks), a projection skip with small
  singular values. Each puts a factor per block back into the product.
- A highway gate bias ≥ 0 starts the gate at T ≥ 1/2, so the carry path passes at most (1 - T)
  per block: (1/2)^L or less.
- Exploding: residual branches that are not scaled add up, ‖I + J‖ ≤ 1 + ρ per block.""",
        fixes="""\
- Add a route around and keep it empty: x_(l+1) = x_l + F(x_l), norm and activation inside the
  branch (family = "preact", He et al. 2016). The all-skips path then carries the output gradient
  to the input unchanged, whatever the branches do.
- Match the init to the activation: He/Kaiming for ReLU (weight_init = ["kaiming_normal"]),
  Glorot/Xavier for tanh; avoid sigmoid inside deep stacks.
- Scale the branch, not the skip: branch_scale = "1/sqrt(depth)", or zero-init the branch's last
  layer (branch_init = ["zero"]), ReZero (branch_init = ["rezero"]) or SkipInit.
- Highway: a negative gate bias (gate_bias = -2 or -3) so the carry path starts open.
- Dense connections give every block a short path to the loss (family = "dense").
- If the bound is only stricter than your network needs, widen lo and hi in the spec.""",
        references=refs("resnet", "identity", "highway", "densenet", "glorot", "delving", "rezero", "skipinit"),
    ),
    "variance_growth": Explanation(
        summary="the activation variance grows over depth no faster than the declared class",
        computes="""\
At every boundary l the probe records s_l = Var(x_l), the variance over all elements of the
boundary tensor, batch included (statistic = "second_moment" uses mean(x_l²) instead). With the
ratio to the input's, r_l = s_l / s_0, the growth is classified, with b = bounded_ratio
(default 4):

    decaying     r_L < 1/b, or some r_l = 0
    bounded      max r_l ≤ b
    exponential  otherwise, when the log-growth per block over the second half of the stack is
                 at least 0.75 × that over the first half (a constant rate, r_l = g^l)
    polynomial   otherwise, when r_l - 1 ∝ l^p with p > 1.5 (log-log fit)
    linear       otherwise (r_l ≈ 1 + a·l)

The invariant holds when the class is no worse than max_growth (in the order above:
decaying < bounded < linear < polynomial < exponential), and, when declared, every r_l satisfies
r_l ≤ max_ratio and r_l ≥ min_ratio. NaN/inf activations always fail. The "activation variance"
plot of the HTML report shows r_l for every probed case, with the band the spec allows.""",
        fails="""\
- Residual addition adds variance: with a branch roughly independent of its input,
  Var(x_(l+1)) = Var(x_l) + Var(F(x_l)). A branch that normalises its input adds a constant each
  block (linear growth); a branch without a norm scales with its input, (1 + c)^L (exponential).
- An init gain that does not match the activation: Xavier under ReLU decays by about 1/2 per
  layer, He under tanh or identity grows by about 2 per layer.
- ReLU shifts the mean: He init preserves the second moment, not the variance. For plain ReLU
  stacks judge statistic = "second_moment".
- Large biases or a skip scale above 1 grow the signal every block.""",
        fixes="""\
- Scale the branch by 1/sqrt(L) (branch_scale = "1/sqrt(depth)"): L branches then add a bounded
  total, O(1) instead of O(L).
- Start each branch at zero: zero-init its last layer (branch_init = ["zero"]), ReZero or
  SkipInit. Every block is the identity at init and the variance is exactly flat.
- Put the norm inside the branch (pre-activation) so each branch adds a fixed amount, and
  declare the honest class for a residual stack: max_growth = "linear".
- He init for ReLU, Glorot for tanh, and bias_init = 0.
- A norm after the addition (post-norm) resets the scale every block (bounded), but it sits on
  the route around and costs the gradient path; check gradient_arrival too.""",
        references=refs("glorot", "delving", "resnet", "identity", "rezero", "skipinit", "densenet"),
    ),
    "identity_at_init": Explanation(
        summary="a stack whose branches start at zero is exactly the identity, forwards and backwards",
        computes="""\
Checked on zero-branch cases only: space.branch_init "zero", "rezero" or "skipinit" (and every
case of a custom family, where the factory decides). In float64, with y the stack's output:

    forward   e_f = ‖f(x) - x‖ / ‖x‖
    backward  e_b = ‖∂L/∂x - ∂L/∂y‖ / ‖∂L/∂y‖
    holds when max(e_f, e_b) ≤ atol   (atol = 0, the default, means bit-exact)

The message names the first block whose output statistics differ from its input's, which is
where to look.""",
        fails="""\
- Something sits after the addition: a ReLU (the original ResNet block, post-norm) maps the
  negative half of x to 0; a norm rescales x; a projection or scaled skip replaces I by W or λI.
- The branch is not really zero: the zeroed layer is followed by a bias, a norm with a non-zero
  shift, or another layer; or only the weight was zeroed and the bias was not.
- A gate that is not closed: a ReZero/SkipInit scalar or highway gate initialised away from 0.
- Width changes between input and output (a projection skip) can never be the identity.
- A non-zero atol is needed when the block computes x + 0·F(x) through an op that rounds, for
  example in float16/bfloat16.""",
        fixes="""\
- End the block with the bare addition x + F(x): norm and activation inside the branch, nothing
  on the route around (family = "preact", He et al. 2016).
- Zero the branch's last layer, weight and bias (branch_init = ["zero"]), or multiply the
  branch by a scalar started at 0: ReZero (branch_init = ["rezero"]) or SkipInit
  (branch_init = ["skipinit"]).
- In a custom block, initialise the last layer, or the last norm's scale, to zero.
- Keep the skip an identity where the widths match; if tiny rounding error is acceptable, set
  expect.identity_at_init.atol in the spec.""",
        references=refs("identity", "rezero", "skipinit", "resnet"),
    ),
    "residual_stream": Explanation(
        summary="the residual stream after its entry: gradient ratio, output variance and block change in "
        "the init's bands",
        computes="""\
From the probe's boundary numbers (g_l = ‖∂L/∂x_l‖, Var(x_l) and E[x_l²] at boundary l, the input
of block l; boundary L the output), four numbers, the first reported apart from the others:

    entry    e = g_0 / g_1                                    (block 0: where the stream enters)
    stream   s = g_1 / g_L                                    lo ≤ s ≤ hi
    variance v = Var(x_L) / Var(x_0) / L^p                    variance_lo ≤ v ≤ variance_hi
    change   c = max over blocks of |sqrt(E[x_(l+1)²]/E[x_l²]) - 1| and |g_l/g_(l+1) - 1|    c ≤ max_block_change

so gradient_arrival's ratio g_0/g_L is e·s exactly. A library language model's stream enters block
0 at its embedding's scale (N(0, 0.02²) per element) while each branch adds O(1), so block 0's
norms multiply the gradient by about rms(x_1)/rms(x_0), a factor set by the embedding's init, not
by the stack: e is bounded by entry_lo and entry_hi where given (an embedding drawn at std 1
instead of 0.02 drops it to about 1), and s judges the stack. p = variance_exponent: 0 bounds
the output's variance in depth (a residual projection scaled by 1/sqrt(2N), as GPT-2's c_proj,
intends it), 1 bounds what each block adds. c is 0 for an identity block and of the order of γ
for x + γ·F(x) (layer scale, init_values 1e-5 or 1e-6). Each number is the median over the case's
seed ensemble (probe.ensemble), the range beside it in the message.""",
        fails="""\
- The stream's gradient ratio grows past hi: branches that add up without a depth scale (each
  block's Jacobian I + J_l with J_l of the branches' size over the stream's).
- The entry factor leaves its band: the embedding's init changed (std 1 instead of 0.02, or a
  missing multiplier such as Gemma's sqrt(width)), or the first block's norm weights did.
- The output variance leaves its band: a residual projection that lost its 1/sqrt(2N) scale makes
  Var(x_L) grow with the depth (about 2N times at N blocks); norm weights (1 + w) initialised
  at w = 1 instead of 0 double every branch.
- The block change passes max_block_change: a layer scale not applied (γ = 1 instead of 1e-6).""",
        fixes="""\
- Put back the init the model declares: its initializer_range for embeddings, the depth scale of
  the residual projections, the layer scale's init_values, the norms' weights (1, or 0 for a
  (1 + w) norm).
- If the model is meant to differ (another model, another config), measure its bands:
  `stability calibrate SPEC` prints every number's spread over 8 seeds at depths 1, 2, 4 and 8
  and the band it sets (the extremes widened by ×1.25); `--write` puts them in the spec, each with
  its spread in a comment; `stability init TARGET` writes a whole spec measured that way.""",
        references=refs("layernorm", "gpt2", "layerscale", "identity", "skipinit"),
    ),
    "mean_shift": Explanation(
        summary="the channels' means stay small next to their variances at the output (no mean shift)",
        computes="""\
At every boundary, with channels c = 1 … C (dim 1 of (B, C) and (B, C, H, W); the last axis of
(B, T, C) tokens) and N values per channel, the signal-propagation statistics of Brock, De and
Smith (2021), as timm's extract_spp_stats computes them:

    average squared channel mean   M = mean_c m_c²      m_c = channel c's mean over the N values
    average channel variance       V = mean_c v_c       v_c = its variance (divisor N)
    whole-tensor variance          Var = V + M - (mean_c m_c)²

and judges the output's mean shift beyond what sampling alone gives (a mean over N values has
variance v/N even when the true mean is 0):

    rho = (M - V/(N - 1)) / V ≤ max_ratio     (default 0.25)

timm's avg_ch_var uses the unbiased variance, V·N/(N - 1). rho/(1 + rho) is the share of the
second moment that fixed per-channel offsets carry; a single ReLU of a standard normal gives
rho ≈ 0.47. One finite network's rho is a noisy sample of the architecture's (a centred tanh
stack of width 18 at batch 8 gives -0.1 to 0.3 across seeds), so, like variance_growth, it is
judged on the case's seed ensemble ([probe] ensemble, default 8): rho is the mean over the
networks, and the message gives their range. The message prints M and V at the input and the
output beside the whole variance.""",
        fails="""\
- ReLU (or GELU, or any non-centred activation) branches: relu(h) has a positive mean in every
  channel, and the next weight matrix turns it into a fixed offset per channel; summed over the
  blocks of a residual stack the offsets grow with depth, inside what looks like variance growth.
- Batch norm before the ReLU centres the branch's input, not its output: the offsets of a
  pre-activation batch-norm stack still accumulate on the route around.
- Positive biases, or a sigmoid, shift every channel the same way.""",
        fixes="""\
- Centre what the branch adds: a centred activation (tanh, or a ReLU minus its mean, as the
  NF-ResNets' scaled activations do), weight standardisation (Brock et al. 2021), or a norm at
  the end of the branch.
- Scale the branches down (branch_scale = "1/sqrt(depth)") so the offsets add up more slowly.
- If the offsets are harmless for your use, raise expect.mean_shift.max_ratio.""",
        references=refs("spp", "identity", "delving"),
    ),
}
