"""`stability explain [INVARIANT]`: what an invariant measures, why it fails, how to fix it, and
where to read more. Plain text only; the numbers and formulas match `stability.invariants`.

The text avoids square brackets that open with a letter: the CLI prints through rich, which would
read `[lo, hi]` as a style tag and drop it. `tests/test_explain.py` checks that the CLI prints the
text unchanged.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from stability.errors import UsageError, did_you_mean
from stability.spec import INVARIANTS

__all__ = ["REFERENCES", "explain_text", "known_invariants"]

REFERENCES: dict[str, str] = {
    "resnet": 'He, Zhang, Ren, Sun (2015). "Deep Residual Learning for Image Recognition". CVPR 2016, arXiv:1512.03385.',
    "identity": 'He, Zhang, Ren, Sun (2016). "Identity Mappings in Deep Residual Networks". ECCV 2016, arXiv:1603.05027.',
    "highway": 'Srivastava, Greff, Schmidhuber (2015). "Highway Networks". arXiv:1505.00387.',
    "densenet": 'Huang, Liu, van der Maaten, Weinberger (2017). "Densely Connected Convolutional Networks". CVPR 2017, arXiv:1608.06993.',
    "rezero": 'Bachlechner, Majumder, Mao, Cottrell, McAuley (2020). "ReZero is All You Need: Fast Convergence at Large Depth". arXiv:2003.04887.',
    "skipinit": 'De, Smith (2020). "Batch Normalization Biases Residual Blocks Towards the Identity Function in Deep Networks" (SkipInit). NeurIPS 2020, arXiv:2002.10444.',
    "glorot": 'Glorot, Bengio (2010). "Understanding the difficulty of training deep feedforward neural networks". AISTATS 2010.',
    "delving": 'He, Zhang, Ren, Sun (2015). "Delving Deep into Rectifiers: Surpassing Human-Level Performance on ImageNet Classification". ICCV 2015, arXiv:1502.01852.',
    "spp": 'Brock, De, Smith (2021). "Characterizing signal propagation to close the performance gap in unnormalized ResNets". ICLR 2021, arXiv:2101.08692.',
}


@dataclass(frozen=True)
class _Entry:
    summary: str
    computes: str
    fails: str
    fixes: str
    references: tuple[str, ...]


_ENTRIES: dict[str, _Entry] = {
    "gradient_arrival": _Entry(
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
"gradient arrival" plot.""",
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
        references=("resnet", "identity", "highway", "densenet", "glorot", "delving", "rezero", "skipinit"),
    ),
    "variance_growth": _Entry(
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
        references=("glorot", "delving", "resnet", "identity", "rezero", "skipinit", "densenet"),
    ),
    "identity_at_init": _Entry(
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
        references=("identity", "rezero", "skipinit", "resnet"),
    ),
    "mean_shift": _Entry(
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
rho ≈ 0.47. The message prints M and V at the input and the output beside the whole variance.""",
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
        references=("spp", "identity", "delving"),
    ),
}


def known_invariants() -> tuple[str, ...]:
    return tuple(_ENTRIES)


def _overview() -> str:
    width = max(len(n) for n in _ENTRIES)
    lines = ["Invariants (run `stability explain NAME` for the formula, the causes and the fixes):", ""]
    lines += [f"  {name:<{width}}  {entry.summary}" for name, entry in _ENTRIES.items()]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(("  " + line) if line else "" for line in text.splitlines())


def explain_text(name: str | None = None) -> str:
    """The explanation of one invariant, or with `None` the list of invariants.

    Raises `UsageError` for an unknown name, with the closest known one."""
    if name is None:
        return _overview()
    entry = _ENTRIES.get(name)
    if entry is None:
        raise UsageError(
            f"unknown invariant '{name}'{did_you_mean(name, _ENTRIES)}; choose one of {', '.join(_ENTRIES)} "
            "(or run `stability explain` for the list)"
        )
    refs = "\n".join(textwrap.fill(REFERENCES[key], width=94, initial_indent="- ", subsequent_indent="  ") for key in entry.references)
    return "\n".join([
        f"{name}: {entry.summary}",
        "",
        "What the harness computes",
        _indent(entry.computes),
        "",
        "Why it typically fails",
        _indent(entry.fails),
        "",
        "Usual fixes",
        _indent(entry.fixes),
        "",
        "References",
        _indent(refs),
    ])


if set(_ENTRIES) != set(INVARIANTS):  # pragma: no cover - a new invariant needs its explanation
    raise RuntimeError(f"stability.explain covers {sorted(_ENTRIES)} but the invariants are {sorted(INVARIANTS)}")
