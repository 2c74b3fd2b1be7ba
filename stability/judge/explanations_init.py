"""The explanation of init_conformance (`stability.judge.init_conformance`): every parameter's
init against the rule its model declares (stability.judge.explanations).
"""

from __future__ import annotations

from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["INIT_EXPLANATIONS"]

INIT_EXPLANATIONS: dict[str, Explanation] = {
    "init_conformance": Explanation(
        summary="every parameter's init follows what its model declares: rows, its class's table, its recorded intent",
        computes="""\
While the case's model is constructed (a library model, or a factory's), the init each parameter
receives is recorded: every in-place write to its storage (torch.nn.init's functions, timm's and
transformers' init functions, normal_, mul_, copy_, p.data = ..., an index write), folded into
an exact law (N(0, 0.02²); U(±1/√fan_in) for nn.Linear's kaiming_uniform_(a=√5); a truncated
normal with its bounds; a constant; computed), with the code that wrote it and whether it is
PyTorch's constructor default; with each parameter its owning module's constructor arguments
(init_values=1e-6). After the probe, one reduction per parameter of the model as the library
initialised it (n, mean, unbiased variance, min, max; a factor the harness applied to reach the
shipped width is divided out; an embedding's padding row apart). The first declaration that
covers a parameter gives its law:

    1. the spec's own rows (rules = ...);
    2. the rows of the rule table of the model's class (stability/judge/init_rules.toml: a row
       per module pattern, numbers from the model's config, e.g. std = initializer_range /
       sqrt(2 * n_layer) for GPT-2's c_proj, each citing its paper or library line). A table
       named for another class is not applied, and the verdict says so; by default a base
       class's table is not applied where the model's class has an init of its own;
    3. the model's own intent. A parameter fails when it was left at PyTorch's constructor
       default where the model declares a law for it (its config's initializer_range or
       init_std, "the standard deviation ... for initializing all weight matrices"; an init
       loop of the model that covers its siblings of the same class), is a layer scale not at
       the init_values / ls_init_value / layer_scale_init_value its module or config gave
       (Touvron et al. 2021), is a constant its module created (a (1 + w) norm's 0) overwritten
       by generic code, is frozen (requires_grad = False) at zero, or was never written; any
       other parameter is judged against the law recorded for it.

Each law is judged on

    mean       x̄ within μ ± z·σ/√n
    variance   s² within σ²·χ²_ν(p)/ν, ν = 2/(2/(n−1) + (κ−3)/n)  (ν = n−1 for a normal law)
    max, min   P(max ≤ x) = F(x)^n and P(min ≥ x) = (1 − F(x))^n at both ends
    constant   min = max = the value, up to the dtype's rounding

every test at level alpha/(number of tests of the case) (default alpha = 1e-6: a correct init
raises a false alarm in at most one case in a million). A std twice the declared one is caught
from about 40 elements, half of it from about 100, a missing 1/√2 depth scaling from about 200.
A row with count must cover that many parameters (a missing layer scale). A parameter nothing
declares (its init computed, or not recorded: a streamed scale = "shipped" model) is listed as
undeclared (uncovered = "fail" fails it); a case that judged nothing is not met. The notes of a
met case (a table not applied, a row that covers nothing, a config value the spec sets against
the registered model's own) are printed under the table.""",
        fails="""\
- A release whose init forgets some layers: Mamba's mixer Linears left at PyTorch's
  U(±1/√fan_in) while its config declares initializer_range (transformers 4.53.3).
- A layer scale at 1 whatever init_values (timm 1.0.21); Gemma's (1 + w) norms filled with 1 by
  the generic init (transformers 4.56.2); a frozen sin-cos table left at zero.
- A release whose init drops a family's special case the table declares: GPT-2's residual
  projections at initializer_range instead of initializer_range/√(2·n_layer).
- An embedding or matrix drawn at std 1.0 instead of initializer_range; biases not zeroed;
  a truncated normal where a normal was declared (its max falls short); values that are not
  the init recorded as the model was constructed.""",
        fixes="""\
- Fix the model's init (its _init_weights, init_weights, reset_parameters, or the factory's
  init) so every parameter gets the law it declares; the failure names the code that wrote it.
- Where your model declares another rule on purpose, add a row (rules = [{ name = "...", law = ...,
  std = ..., source = "..." }]) or a config value the rule reads (config = { init_values = 1e-5 }).
- A note "config sets K = v; MODEL registers w": the spec builds another model than the one the
  library registers; drop the key unless that is what you mean to check.""",
        references=refs("gpt2_init", "cait", "goyal_zero_gamma", "gemma", "cramer", "david"),
    ),
}
