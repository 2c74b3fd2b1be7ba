"""The explanation of init_conformance (`stability.judge.init_conformance`): every parameter's
init against the rule its model declares (stability.judge.explanations).
"""

from __future__ import annotations

from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["INIT_EXPLANATIONS"]

INIT_EXPLANATIONS: dict[str, Explanation] = {
    "init_conformance": Explanation(
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
        references=refs("gpt2_init", "cait", "goyal_zero_gamma", "gemma", "cramer", "david"),
    ),
}
