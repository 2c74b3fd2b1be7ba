"""The weight gains of the harness's inits, as numbers (no torch): one table that the builder,
the mean-field oracle, the laws and `stability explain` share.

`NONLINEARITY[act]` is the `nonlinearity` the builder passes to `torch.nn.init.kaiming_*` for a
block's activation (GELU is initialised as ReLU), and `KAIMING_GAIN2[act]` is that init's
σ_w² = gain², the weight variance times the fan-in (He et al. 2015): 2 for ReLU, (5/3)² for tanh
(torch's `calculate_gain`), 1 for the sigmoid and the identity. tests/test_init.py checks the
table against torch's `calculate_gain`.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["NONLINEARITY", "KAIMING_GAIN2"]

NONLINEARITY: dict[str, Literal["relu", "tanh", "sigmoid", "linear"]] = {
    "relu": "relu",
    "gelu": "relu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "identity": "linear",
}

KAIMING_GAIN2: dict[str, float] = {"relu": 2.0, "gelu": 2.0, "tanh": (5.0 / 3.0) ** 2, "sigmoid": 1.0, "identity": 1.0}
