"""The explanations of the training invariants (`stability.judge.train_invariants`): update_size,
trainability and residual_size, each judged on an optimizer run (stability.judge.explanations).
"""

from __future__ import annotations

from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["TRAINING_EXPLANATIONS"]

TRAINING_EXPLANATIONS: dict[str, Explanation] = {
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
        references=refs("mup"),
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
        references=refs("resnet", "identity", "fixup", "rezero", "skipinit", "goyal"),
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
        references=refs("resnet", "identity", "veit", "rezero"),
    ),
}
