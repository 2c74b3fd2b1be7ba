"""The explanations of the built-in invariants (`stability explain NAME`): what each measures,
why it fails, how to fix it, and where to read more. Plain text; the numbers and formulas match
the judges (`stability.judge.invariants`, `token_invariants`, `theory_checks`, `train_invariants`),
and each is the `explanation` of its registry entry (`stability.judge.catalog`).

The texts avoid square brackets that open with a letter: the CLI prints through rich, which would
read `[lo, hi]` as a style tag and drop it (tests/test_explain.py checks the CLI prints them unchanged).
"""

from __future__ import annotations

from stability.families.gains import KAIMING_GAIN2
from stability.spec.registry import Explanation

__all__ = ["REFERENCES", "EXPLANATIONS"]


def _refs(*keys: str) -> tuple[str, ...]:
    return tuple(REFERENCES[k] for k in keys)


REFERENCES: dict[str, str] = {
    "resnet": 'He, Zhang, Ren, Sun (2015). "Deep Residual Learning for Image Recognition". CVPR 2016, arXiv:1512.03385.',
    "identity": 'He, Zhang, Ren, Sun (2016). "Identity Mappings in Deep Residual Networks". ECCV 2016, arXiv:1603.05027.',
    "highway": 'Srivastava, Greff, Schmidhuber (2015). "Highway Networks". arXiv:1505.00387.',
    "densenet": 'Huang, Liu, van der Maaten, Weinberger (2017). "Densely Connected Convolutional Networks". CVPR 2017, arXiv:1608.06993.',
    "rezero": 'Bachlechner, Majumder, Mao, Cottrell, McAuley (2020). "ReZero is All You Need: Fast Convergence at Large Depth". arXiv:2003.04887.',
    "skipinit": 'De, Smith (2020). "Batch Normalization Biases Residual Blocks Towards the Identity Function in Deep Networks" (SkipInit). NeurIPS 2020, arXiv:2002.10444.',
    "glorot": 'Glorot, Bengio (2010). "Understanding the difficulty of training deep feedforward neural networks". AISTATS 2010.',
    "pennington": 'Pennington, Schoenholz, Ganguli (2017). "Resurrecting the sigmoid in deep learning through dynamical isometry: theory and practice". NeurIPS 2017, arXiv:1711.04735.',
    "poole": 'Poole, Lahiri, Raghu, Sohl-Dickstein, Ganguli (2016). "Exponential expressivity in deep neural networks through transient chaos". NeurIPS 2016, arXiv:1606.05340.',
    "schoenholz": 'Schoenholz, Gilmer, Ganguli, Sohl-Dickstein (2017). "Deep Information Propagation". ICLR 2017, arXiv:1611.01232.',
    "hanin": 'Hanin (2018). "Which Neural Net Architectures Give Rise to Exploding and Vanishing Gradients?". NeurIPS 2018, arXiv:1801.03744.',
    "yang": 'Yang, Schoenholz (2017). "Mean Field Residual Networks: On the Edge of Chaos". NeurIPS 2017, arXiv:1712.08969.',
    "veit": 'Veit, Wilber, Belongie (2016). "Residual Networks Behave Like Ensembles of Relatively Shallow Networks". NeurIPS 2016, arXiv:1605.06431.',
    "delving": 'He, Zhang, Ren, Sun (2015). "Delving Deep into Rectifiers: Surpassing Human-Level Performance on ImageNet Classification". ICCV 2015, arXiv:1502.01852.',
    "rank": 'Dong, Cordonnier, Loukas (2021). "Attention is Not All You Need: Pure Attention Loses Rank Doubly Exponentially with Depth". ICML 2021, arXiv:2103.03404.',
    "signal": (
        'Noci, Anagnostidis, Biggio, Orvieto, Singh, Lucchi (2022). "Signal Propagation in Transformers: Theoretical Perspectives and the Role of Rank Collapse". NeurIPS 2022, arXiv:2206.03126.'
    ),
    "entropy": (
        'Zhai, Likhomanenko, Littwin, Busbridge, Ramapuram, Zhang, Gu, Susskind (2023). "Stabilizing Transformer Training by Preventing Attention Entropy Collapse". ICML 2023, arXiv:2303.06296.'
    ),
    "layernorm": 'Xiong, Yang, He, Zheng, Zheng, Xing, Zhang, Lan, Wang, Liu (2020). "On Layer Normalization in the Transformer Architecture". ICML 2020, arXiv:2002.04745.',
    "deepnet": 'Wang, Ma, Dong, Huang, Zhang, Wei (2022). "DeepNet: Scaling Transformers to 1,000 Layers". arXiv:2203.00555.',
    "layerscale": 'Touvron, Cord, Sablayrolles, Synnaeve, Jégou (2021). "Going deeper with Image Transformers" (CaiT, LayerScale). ICCV 2021, arXiv:2103.17239.',
    "mup": 'Yang, Hu, Babuschkin, Sidor, Liu, Farhi, Ryder, Pachocki, Chen, Gao (2021). "Tensor Programs V: Tuning Large Neural Networks '
    'via Zero-Shot Hyperparameter Transfer" (muP). arXiv:2203.03466.',
    "fixup": 'Zhang, Dauphin, Ma (2019). "Fixup Initialization: Residual Learning Without Normalization". ICLR 2019, arXiv:1901.09321.',
    "goyal": 'Goyal, Dollar, Girshick, Noordhuis, Wesolowski, Kyrola, Tulloch, Jia, He (2017). "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (gradual warm-up). arXiv:1706.02677.',
    "gpt2": 'Radford, Wu, Child, Luan, Amodei, Sutskever (2019). "Language Models are Unsupervised Multitask Learners" (GPT-2; residual projections scaled by 1/sqrt(N)). OpenAI technical report.',
    "spp": 'Brock, De, Smith (2021). "Characterizing signal propagation to close the performance gap in unnormalized ResNets". ICLR 2021, arXiv:2101.08692.',
}


def _mean_field_computes() -> str:
    """The mean_field text, with chi_1 computed for the builder's inits (the prediction a spec gets)."""
    from stability.judge.meanfield import ACTIVATIONS, mean_field

    rows = []
    for act in ACTIVATIONS:
        k = mean_field(act, sigma_w2=KAIMING_GAIN2[act]).chi1
        x = mean_field(act, sigma_w2=1.0).chi1
        d = mean_field(act, sigma_w2=1.0 / 3.0).chi1
        rows.append(f"    {act:<9} kaiming {k:8.4f}   xavier {x:8.4f}   default {d:8.4f}")
    table = "\n".join(rows)
    return f"""\
A plain stack x_(l+1) = act(W x_l + b), W ~ N(0, sigma_w2/n), b ~ N(0, sigma_b2), is described at
infinite width by the pre-activation variance q_l (q_(l+1) = sigma_w2 E[act(sqrt(q_l) z)^2] + sigma_b2,
Poole et al. 2016) and the per-block factor of the squared gradient norm

    chi_l = sigma_w2 E[act'(sqrt(q_l) z)^2]        (Schoenholz et al. 2017, eq. 5)

computed by Gaussian quadrature along the stack from the input's E[x^2] = 1 (one-layer
pre-activation residual stacks: chi_l = 1 + a^2 sigma_w2 E[act'^2], Yang & Schoenholz 2017). The
spec's init gives sigma_w2 (kaiming gain^2, xavier 1, normal init_std^2 n, default 1/3) and
sigma_b2 (the default bias 1/(3n), or 0). The measured factor is (g_0/g_L)^(2/L). At width n the
per-block log factor has variance v_l = (3 kappa_l - 1)/n, kappa = E[act'^4]/E[act'^2]^2 (5/n for
ReLU, Hanin 2018), and mean ln chi_l - v_l/2, so the invariant holds when

    |ln(measured) - mean ln chi_l| <= sum(v_l)/(2L) + k_sigma sqrt(sum(v_l))/L

The measured factor judged is the median over the case's seed ensemble ([probe] ensemble, 8 by
default: one network's log factor has a heavy lower tail at small batches), and the message prints
it next to the prediction, with the case's own network. chi_1 at the fixed point for the
builder's inits with sigma_b2 = 0 (below 1 the gradient vanishes, above 1 it explodes):

{table}"""


EXPLANATIONS: dict[str, Explanation] = {
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
        references=_refs("resnet", "identity", "highway", "densenet", "glorot", "delving", "rezero", "skipinit"),
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
        references=_refs("glorot", "delving", "resnet", "identity", "rezero", "skipinit", "densenet"),
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
        references=_refs("identity", "rezero", "skipinit", "resnet"),
    ),
    "jacobian_spectrum": Explanation(
        summary="the input-output Jacobian is close to an isometry: its singular values are not spread out",
        computes="""\
Measured after the probe, only when the spec declares it. J = dy/dx of the whole batch map (for
blocks that act per example, the union of the per-example Jacobians). With N = batch x input size:

    mean s2   = tr(J^T J) / N    Hutchinson: the mean of |J v|^2 / N over `probes` Gaussian v,
                                 forward-mode products (torch.func.jvp); standard error
                                 sqrt(2 sum s^4 / K) / N, reported from the sample
    max s2    = largest s^2      power iteration on J^T J (jvp, then vjp); a lower bound that
                                 converges as (s_2/s_1)^(2k)
    spread    = max s2 / mean s2 which must satisfy  spread <= max_spread
                                 (and mean_lo <= mean s2 <= mean_hi when set)

With `exact = true` J is formed (torch.func.jacrev) and torch.linalg.svdvals gives every singular
value; only for N <= 4096. Predictions (Pennington, Schoenholz & Ganguli 2017): a zero-branch
residual stack is J = I (spread 1); an orthogonal linear stack is an exact isometry; a plain ReLU
stack at criticality keeps mean s2 = 1 but the variance of s2 over the spectrum grows as 2L
(Gaussian weights) or L (orthogonal weights), so the spread grows with depth.""",
        fails="""\
- A plain stack: every block multiplies the Jacobian by W D, and the spectrum of a product of L
  random matrices spreads out with L even when its mean is kept at 1 (ReLU with kaiming init).
- Full-size residual branches: I + J_F has singular values far from 1 once J_F is not small.
- Off criticality the mean itself drifts (mean_lo / mean_hi catch it).""",
        fixes="""\
- Orthogonal weights with an activation that is linear near 0 (tanh at small weight variance)
  approach dynamical isometry; ReLU cannot reach it (Pennington et al. 2017).
- Residual branches that start small or at zero (branch_scale = "1/sqrt(depth)", ReZero,
  SkipInit) keep J close to I.""",
        references=_refs("pennington", "identity", "rezero"),
    ),
    "mean_field": Explanation(
        summary="the gradient's per-block growth matches the mean-field prediction chi_1",
        computes=_mean_field_computes,  # a table computed when shown (~0.1 s of quadrature)
        fails="""\
- The stack is not what the oracle models: a normalisation layer, or a custom init the spec
  maps to another variance (the prediction is for the unnormalised stack).
- Very narrow or very deep stacks, where the O(1/width) first-order band no longer describes
  the spread (it is conservative for batches, which average some of it out).
- A bug in the init: the measured factor then follows another sigma_w2.""",
        fixes="""\
- Choose sigma_w2 on the critical line (chi_1 = 1; stability.judge.meanfield.critical_sigma_w2):
  kaiming init for ReLU, sigma_w2 near 1.76 for tanh with sigma_b2 = 0.05.
- Keep the depth within a few times xi = 1/|ln chi_1| (Schoenholz et al.: trainable to about
  6 xi).""",
        references=_refs("poole", "schoenholz", "hanin", "yang"),
    ),
    "lesion": Explanation(
        summary="removing one block barely changes the output (residual stacks)",
        computes="""\
Measured after the probe, only when the spec declares it. For every block l the block is
replaced by the identity (its input passed on unchanged; for a residual block the branch is
dropped and the route around kept) and the rest of the stack rerun:

    change_l = |f(x) - f_without_l(x)| / |f(x)|         (Frobenius norms over the batch)
    holds when max_l change_l <= max_change   (statistic = "max"; or the median)

A block that changes the shape (a dense layer, a widening first block) cannot be removed and is
skipped. For a linear residual chain with branches a*Q (Q orthogonal) the expected squared change
is a^2 / (1 + a^2) for every block; a plain stack loses every path through the removed layer.""",
        fails="""\
- A plain stack: every path runs through every layer, so removing one changes the output by
  about as much as the output itself (Veit et al. 2016).
- Residual branches as large as the route around: each then carries half the signal.""",
        fixes="""\
- Residual blocks with small branches at initialisation (branch_scale = "1/sqrt(depth)",
  ReZero, SkipInit, zero-initialised last layers).""",
        references=_refs("veit", "identity"),
    ),
    "update_size": Explanation(
        summary="the first optimizer step moves every activation by an amount that does not depend on the width",
        computes="""\
The coordinate check of Yang et al. 2021. The case's blocks sit between an input layer (the
fixed-size input to width channels) and a readout (average pool, linear); the network is built
at every width in `widths`, the other values of the case held, and trained train.steps
full-batch steps (train.optimizer, train.lr) on a fixed synthetic set drawn from the case's
seed. At every boundary (the input layer's output, each block's output, the readout's output)
on that set:

    RMS(dh) = ||h_after - h_before|| / sqrt(n),     n = the number of entries of h
    slope   = least-squares slope of log RMS(dh) against log width
    holds when |slope| <= max_abs_slope at every boundary (at = "all") or at the output

The message names the boundary with the largest |slope| and the first width whose RMS(dh)
leaves the cone RMS_0 * (w/w_0)^(+-max_abs_slope) from the smallest width. The verdict also
keeps ||dW||/||W|| of every weight at every width.""",
        fails="""\
- Standard parametrisation (one learning rate for every layer) with Adam: Adam's first step
  moves every weight entry by about lr, in the direction of its gradient, so a hidden layer's
  change dW h sums `width` aligned terms: RMS(dh) grows like width (slope +1), and the
  readout's change adds the hidden change through weights aligned with it (up to +1.5).
- Standard parametrisation with SGD: the hidden gradient entries are O(1/sqrt(width)) and
  dW h sums `width` aligned terms, so RMS(dh) grows like sqrt(width) (slope +1/2), the
  readout's like width (+1), while the input layer's update shrinks (-1/2).
- A learning rate tuned at one width then blows up (or, scaled down, freezes the small
  model): the optimum learning rate drifts with the width.""",
        fixes="""\
- Use muP (train.parametrization = "mup", base_width = the width you tuned at): the readout's
  input is multiplied by base_width/width and its init by sqrt(width/base_width); hidden
  weights get learning rate lr*base_width/width under Adam; under SGD the input weights,
  biases and gains get lr*width/base_width (Yang et al. 2021, Table 3). The mup package
  (MuReadout, MuAdam, MuSGD) does the same for your own models.
- Judge only the output (at = "output") when only the logits' scale matters to you.""",
        references=_refs("mup"),
    ),
    "trainability": Explanation(
        summary="a short training run on a synthetic task stays finite and makes progress (and deeper is no worse)",
        computes="""\
The case's blocks between an input layer and a readout are trained train.steps full-batch
steps (train.optimizer, train.lr, a linear warm-up over train.warmup steps) on a fixed set of
train.samples inputs x ~ N(0, 1) drawn from the case's seed, with targets from a random tanh
teacher (task = "teacher", loss 1/2 mean((f - y)^2)) or random labels (task = "labels",
cross-entropy). The loss is recorded before every step and after the last.

    fails        when any loss is NaN or inf (the run diverged)
    loss ratio   final / initial <= max_loss_ratio (when declared)
    depth ratio  with compare_depths = (shallow, deep), a two-element list: two runs, the same case at the two
                 depths, and final(deep) <= max_depth_ratio * final(shallow)

The HTML report draws the loss curves of the deciding case.""",
        fails="""\
- The degradation problem (He et al. 2016): a deeper plain stack, trained the same way, ends
  with a higher training loss than a shallower one, although it could copy it.
- Full-size residual branches without normalisation: the output grows like 2^(depth/2) at
  initialisation, the first gradients are huge, and a learning rate that a zero-initialised
  stack takes from step one makes the loss overflow; such stacks need a warm-up.
- A learning rate too large for the width (see update_size), or too small to make progress in
  train.steps steps.""",
        fixes="""\
- Residual connections with an empty route around (family = "preact").
- Start every branch at zero: branch_init = ["zero"] (Goyal et al. 2017, Fixup), ReZero or
  SkipInit; the first forward pass is then the identity and no warm-up is needed (Zhang et al.
  2019, Bachlechner et al. 2020, De and Smith 2020).
- Otherwise warm the learning rate up (train.warmup) or lower it; scale branches by 1/sqrt(depth).""",
        references=_refs("resnet", "identity", "fixup", "rezero", "skipinit", "goyal"),
    ),
    "residual_size": Explanation(
        summary="after training, each block changes the signal only a little, and less in deeper stacks",
        computes="""\
After the same run as trainability, on the training set, for every block l:

    r_l = ||x_(l+1) - x_l|| / ||x_l||     (for an identity skip: the branch's ||F(x_l)|| / ||x_l||)
    mean = the average of r_l over the blocks
    holds when mean <= max_mean (when declared) and, with compare_depths = (shallow, deep), a two-element list,
          mean(deep) <= max_depth_ratio * mean(shallow)

A diverged run, or a block that changes the shape of its input, fails.""",
        fails="""\
- Plain stacks: every block replaces its input, r_l is about 1 or more.
- Residual branches that grow during training until they dominate the route around (a too
  large learning rate, no normalisation, full-size branches).""",
        fixes="""\
- Keep the route around empty and the branches small: preact blocks, zero-initialised or
  ReZero branches, branch_scale = "1/sqrt(depth)". He et al. 2015 (Sec. 4.2) and Veit et al.
  2016 found learned residuals small, and smaller in deeper networks.""",
        references=_refs("resnet", "identity", "veit", "rezero"),
    ),
    "residual_stream": Explanation(
        summary="the residual stream after its entry: gradient ratio, output variance and block change in the init's bands",
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
- If the model is meant to differ, measure it (stability check --profile thorough) and set the
  bands from its seed ensemble's spread.""",
        references=_refs("layernorm", "gpt2", "layerscale", "identity", "skipinit"),
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
        references=_refs("spp", "identity", "delving"),
    ),
}


EXPLANATIONS["rank_collapse"] = Explanation(
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
    references=_refs("rank", "signal", "layernorm"),
)

EXPLANATIONS["attention_entropy"] = Explanation(
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
    references=_refs("entropy", "layernorm"),
)

EXPLANATIONS["gradient_balance"] = Explanation(
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
    references=_refs("layernorm", "deepnet", "layerscale"),
)

REFERENCES["gpt2"] = 'Radford, Wu, Child, Luan, Amodei, Sutskever (2019). "Language Models are Unsupervised Multitask Learners" (GPT-2), §2.3.'
REFERENCES["cait"] = 'Touvron, Cord, Sablayrolles, Synnaeve, Jégou (2021). "Going deeper with Image Transformers" (CaiT, layer scale). ICCV 2021, arXiv:2103.17239.'
REFERENCES["goyal"] = 'Goyal, Dollár, Girshick, et al. (2017). "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (zero-γ). arXiv:1706.02677.'
REFERENCES["gemma"] = 'Gemma Team (2024). "Gemma: Open Models Based on Gemini Research and Technology". arXiv:2403.08295.'
REFERENCES["cramer"] = 'Cramér (1946). Mathematical Methods of Statistics, §27.4 (the variance of the sample variance); Wilson, Hilferty (1931). "The distribution of chi-square". PNAS 17.'
REFERENCES["david"] = 'David, Nagaraja (2003). "Order Statistics", 3rd ed., §2.1 (the distribution of the sample maximum and minimum). Wiley.'

EXPLANATIONS["init_conformance"] = Explanation(
    summary="every parameter's init follows the rule its model declares (initializer_range, depth-scaled projections, norms, layer scale, tokens)",
    computes="""\
Measured after the probe (no extra forward): one reduction per parameter of the model as the
library initialised it (n, mean, unbiased variance, min, max; a factor the harness applied to
reach the shipped width is divided out; an embedding's padding row is judged apart). The rule
is data: the rule table of the model's family (stability/judge/init_rules.toml: a row per
module pattern, law and numbers computed from the model's own config, e.g.
std = initializer_range / sqrt(2 * n_layer) for GPT-2's c_proj, each row citing its paper or
library line), after the spec's own rows (rules = ... under expect.init_conformance). The
first row that covers a parameter gives its law: normal, trunc_normal, uniform, constant, or
any (declared, not judged). Each parameter is judged on

    mean       x̄ within μ ± z·σ/√n
    variance   s² within σ²·χ²_ν(p)/ν, ν = 2/(2/(n−1) + (κ−3)/n)  (ν = n−1 for a normal law)
    max, min   P(max ≤ x) = F(x)^n and P(min ≥ x) = (1 − F(x))^n at both ends
    constant   min = max = the value, up to the dtype's rounding

every test at level alpha/(number of tests of the case) (default alpha = 1e-6: a correct init
raises a false alarm in at most one case in a million). A std twice the declared one is caught
from about 40 elements, half of it from about 100, a missing 1/√2 depth scaling from about 200. A row with count must cover that many
parameters (a missing layer scale), and a parameter no row covers fails (uncovered = "allow"
lists it instead). The failure names, per row, the parameters (layer indices as *), the
statistic observed and declared, the rule's expression and its source.""",
    fails="""\
- A release whose init forgets a family's special case: GPT-2's residual projections at
  initializer_range instead of initializer_range/√(2·n_layer); Gemma's (1 + w) norms at w = 1;
  a layer scale at 1 or missing; a cls token or position embedding left at zero or drawn N(0, 1).
- An embedding or matrix drawn at std 1.0 instead of initializer_range; biases not zeroed;
  norm weights not ones; a truncated normal where a normal was declared (its max falls short).
- The table (or your rows) declaring another rule than the library: the source is shown, so the
  disagreement can be checked against the library's code.""",
    fixes="""\
- Fix the model's _init_weights (or the factory's init) to the declared rule; for transformers,
  check the family's PreTrainedModel._init_weights against the row's source.
- Where your model declares another rule on purpose, add a row (rules = [{ name = "...", law = ...,
  std = ..., source = "..." }]) or a config value the rule reads (config = { init_values = 1e-5 }).""",
    references=_refs("gpt2", "cait", "goyal", "gemma", "cramer", "david"),
)
