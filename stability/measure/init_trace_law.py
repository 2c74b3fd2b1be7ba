"""The law a parameter's init writes, as the recorder (`stability.measure.init_trace`) folds it.

`RecordedLaw` is exact: the numbers are the ones the init function was called with, or the ones
an in-place operation applied to a known law, never estimated from the values.

- **An init function** (`LAW_FRAMES`: torch.nn.init's, timm's `trunc_normal_`/`trunc_normal_tf_`)
  gives its law from its own arguments, read from its frame: `normal_(mean, std)` is N(mean, std²);
  `kaiming_uniform_(a, mode, nonlinearity)` is U(±gain·√(3/fan)) with torch's own fan and gain
  (He et al. 2015), `xavier_uniform_(gain)` U(±gain·√(6/(fan_in + fan_out))) (Glorot, Bengio
  2010); timm's `trunc_normal_tf_(mean, std, a, b)` truncates the standard normal at [a, b] and
  then scales, so its bounds are mean + a·std and mean + b·std.
- **An in-place operation** outside an init function folds into the law it acts on (`fold`):
  `mul_(s)`/`div_(s)` scale it, `add_(s)`/`sub_(s)` shift it, `fill_`/`zero_` make a constant,
  `normal_`/`uniform_` draw a new law, and `erfinv_` of U(2Φ(α) − 1, 2Φ(β) − 1) is the inverse-CDF
  sampler's truncated normal N(0, ½) on [α/√2, β/√2] (erf(x) = 2Φ(x√2) − 1), so a library's own
  truncated normal written with `uniform_`, `erfinv_`, `mul_`, `add_` and `clamp_` is recognised
  without knowing the library. Anything else (a tensor operand, `exponential_`, a clamp that cuts
  the law) makes the law "computed": recorded, not judged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Literal

import torch

from stability.measure.measurements import serializable

__all__ = ["LawKind", "RecordedLaw", "LAW_FRAMES", "INIT_MODULES", "fold", "law_of_frame"]

LawKind = Literal["normal", "trunc_normal", "uniform", "constant", "orthogonal", "eye", "dirac", "computed", "empty"]

#: The modules whose functions are init functions (a write inside one is attributed to the outermost).
INIT_MODULES = frozenset({"torch.nn.init", "transformers.initialization", "timm.layers.weight_init"})

_N = NormalDist()


@serializable
@dataclass(frozen=True, kw_only=True)
class RecordedLaw:
    """One law: normal (mean, std), trunc_normal (mean, std, a, b: torch's `trunc_normal_`), uniform
    (a, b), constant (value), orthogonal/eye/dirac (times `gain`), computed (`how`: what made it)
    or empty (`torch.empty` times `gain`, never written: `init_values * torch.empty(d)` carries its
    factor to the write that follows)."""

    kind: LawKind
    mean: float = 0.0
    std: float = 0.0
    a: float = 0.0
    b: float = 0.0
    value: float = 0.0
    gain: float = 1.0
    how: str = ""

    def describe(self) -> str:
        g = "" if self.gain == 1 else f" × {self.gain:.4g}"
        return {
            "normal": f"N({self.mean:.4g}, {self.std:.4g}²)",
            "trunc_normal": f"N({self.mean:.4g}, {self.std:.4g}²) truncated to [{self.a:.4g}, {self.b:.4g}]",
            "uniform": f"U({self.a:.4g}, {self.b:.4g})",
            "constant": f"= {self.value:.6g}",
            "orthogonal": f"orthogonal{g}",
            "eye": f"identity{g}",
            "dirac": f"Dirac delta{g}",
            "computed": f"computed ({self.how})" if self.how else "computed",
            "empty": f"torch.empty{g} (never written)",
        }[self.kind]

    def scaled(self, s: float) -> RecordedLaw:
        """The law of s·X."""
        if s == 0 and self.kind != "empty":
            return constant(0.0)
        if self.kind == "normal":
            return replace(self, mean=self.mean * s, std=self.std * abs(s))
        if self.kind == "uniform":
            lo, hi = sorted((self.a * s, self.b * s))
            return replace(self, a=lo, b=hi)
        if self.kind == "trunc_normal":
            lo, hi = sorted((self.a * s, self.b * s))
            return replace(self, mean=self.mean * s, std=self.std * abs(s), a=lo, b=hi)
        if self.kind == "constant":
            return replace(self, value=self.value * s)
        if self.kind in ("orthogonal", "eye", "dirac", "empty"):
            return replace(self, gain=self.gain * s)
        if self.kind == "computed":
            return replace(self, how=f"{self.how} × {s:.4g}" if self.how else f"× {s:.4g}")
        return self

    def shifted(self, s: float) -> RecordedLaw:
        """The law of X + s."""
        if s == 0:
            return self
        if self.kind == "normal":
            return replace(self, mean=self.mean + s)
        if self.kind == "uniform":
            return replace(self, a=self.a + s, b=self.b + s)
        if self.kind == "trunc_normal":
            return replace(self, mean=self.mean + s, a=self.a + s, b=self.b + s)
        if self.kind == "constant":
            return replace(self, value=self.value + s)
        return computed(f"{self.describe()} + {s:.4g}")


def computed(how: str) -> RecordedLaw:
    return RecordedLaw(kind="computed", how=how)


def constant(value: float) -> RecordedLaw:
    return RecordedLaw(kind="constant", value=float(value))


def _uniform(a: float, b: float) -> RecordedLaw:
    lo, hi = sorted((float(a), float(b)))
    return constant(lo) if lo == hi else RecordedLaw(kind="uniform", a=lo, b=hi)


def _normal(mean: float, std: float) -> RecordedLaw:
    return constant(mean) if std == 0 else RecordedLaw(kind="normal", mean=float(mean), std=abs(float(std)))


def _trunc(mean: float, std: float, a: float, b: float) -> RecordedLaw:
    if std == 0 or a == b:
        return constant(min(max(mean, a), b))
    lo, hi = sorted((float(a), float(b)))
    return RecordedLaw(kind="trunc_normal", mean=float(mean), std=abs(float(std)), a=lo, b=hi)


def _number(v: Any) -> float | None:
    """A Python number, or a one-element tensor's value; None for anything else."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_meta:
        return float(v.detach().reshape(()).item())
    return None


# ----------------------------------------------------------------------------- init functions


def _kaiming(loc: Mapping[str, Any], t: torch.Tensor, *, uniform: bool) -> RecordedLaw:
    # torch.nn.init.kaiming_*_: std = gain / √fan, the uniform's bound √3·std (He et al. 2015)
    fan = torch.nn.init._calculate_correct_fan(t, loc.get("mode", "fan_in"))
    gain = torch.nn.init.calculate_gain(loc.get("nonlinearity", "leaky_relu"), loc.get("a", 0))
    std = gain / math.sqrt(fan)
    return _uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std) if uniform else _normal(0.0, std)


def _xavier(loc: Mapping[str, Any], t: torch.Tensor, *, uniform: bool) -> RecordedLaw:
    # torch.nn.init.xavier_*_: std = gain·√(2/(fan_in + fan_out)) (Glorot, Bengio 2010)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(t)
    std = float(loc.get("gain", 1.0)) * math.sqrt(2.0 / float(fan_in + fan_out))
    return _uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std) if uniform else _normal(0.0, std)


def _tf(loc: Mapping[str, Any], t: torch.Tensor) -> RecordedLaw:
    # timm trunc_normal_tf_: the standard normal truncated to [a, b], then × std + mean
    mean, std = float(loc.get("mean", 0.0)), float(loc.get("std", 1.0))
    return _trunc(mean, std, mean + float(loc.get("a", -2.0)) * std, mean + float(loc.get("b", 2.0)) * std)


_Builder = Callable[[Mapping[str, Any], torch.Tensor], RecordedLaw]
_TORCH: dict[str, _Builder] = {
    "uniform_": lambda loc, t: _uniform(loc.get("a", 0.0), loc.get("b", 1.0)),
    "normal_": lambda loc, t: _normal(loc.get("mean", 0.0), loc.get("std", 1.0)),
    "trunc_normal_": lambda loc, t: _trunc(
        loc.get("mean", 0.0), loc.get("std", 1.0), loc.get("a", -2.0), loc.get("b", 2.0)
    ),
    "constant_": lambda loc, t: constant(_number(loc.get("val")) or 0.0),
    "ones_": lambda loc, t: constant(1.0),
    "zeros_": lambda loc, t: constant(0.0),
    "eye_": lambda loc, t: RecordedLaw(kind="eye"),
    "dirac_": lambda loc, t: RecordedLaw(kind="dirac"),
    "orthogonal_": lambda loc, t: RecordedLaw(kind="orthogonal", gain=float(loc.get("gain", 1.0))),
    "sparse_": lambda loc, t: computed(f"sparse_(sparsity={loc.get('sparsity')}, std={loc.get('std')})"),
    "kaiming_uniform_": lambda loc, t: _kaiming(loc, t, uniform=True),
    "kaiming_normal_": lambda loc, t: _kaiming(loc, t, uniform=False),
    "xavier_uniform_": lambda loc, t: _xavier(loc, t, uniform=True),
    "xavier_normal_": lambda loc, t: _xavier(loc, t, uniform=False),
}

#: (module, function) → the law it writes, from its frame's arguments and the tensor it writes.
#: transformers.initialization's functions call torch's, whose frames are nearer the write.
LAW_FRAMES: dict[tuple[str, str], _Builder] = {
    **{("torch.nn.init", name): fn for name, fn in _TORCH.items()},
    ("timm.layers.weight_init", "trunc_normal_"): _TORCH["trunc_normal_"],
    ("timm.layers.weight_init", "trunc_normal_tf_"): _tf,
}


def law_of_frame(key: tuple[str, str], arguments: Mapping[str, Any], tensor: torch.Tensor) -> RecordedLaw:
    """The law the init function `key` writes into `tensor`, called with `arguments`."""
    try:
        return LAW_FRAMES[key](arguments, tensor)
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # arguments the law cannot be read from
        return computed(f"{key[0]}.{key[1]} ({type(exc).__name__}: {exc})")


# ----------------------------------------------------------------------------- in-place operations

_SCALE = {"mul_": 1, "__imul__": 1, "div_": -1, "__itruediv__": -1, "true_divide_": -1}
_SHIFT = {"add_": 1, "__iadd__": 1, "sub_": -1, "__isub__": -1, "subtract_": -1}


#: A clamp bound beyond which a normal law holds less mass than this is its truncation there: the
#: difference (an atom of that mass at the bound) is below what any sample of a parameter can show.
_NEGLIGIBLE = 1e-12


def _clamp(law: RecordedLaw, lo: float | None, hi: float | None) -> RecordedLaw:
    """A clamp that cuts nothing of the law (bounds outside its support, up to float rounding), or
    only a negligible tail of a normal one (the inverse-CDF sampler's clamp at 10σ and beyond)."""
    if law.kind == "constant":
        v = law.value
        return constant(min(max(v, lo if lo is not None else v), hi if hi is not None else v))
    if law.kind == "uniform":
        tol = 1e-9 * max(abs(law.a), abs(law.b), 1e-30)
        if (lo is None or lo <= law.a + tol) and (hi is None or hi >= law.b - tol):
            return law
    if law.kind in ("normal", "trunc_normal"):
        a, b = (law.a, law.b) if law.kind == "trunc_normal" else (-math.inf, math.inf)
        below = 0.0 if lo is None or lo <= a else 0.5 * math.erfc((law.mean - lo) / law.std / math.sqrt(2))
        above = 0.0 if hi is None or hi >= b else 0.5 * math.erfc((hi - law.mean) / law.std / math.sqrt(2))
        if below < _NEGLIGIBLE and above < _NEGLIGIBLE:
            new_a = a if lo is None else max(a, lo)
            new_b = b if hi is None else min(b, hi)
            if math.isinf(new_a) and math.isinf(new_b):
                return RecordedLaw(kind="normal", mean=law.mean, std=law.std)
            return _trunc(law.mean, law.std, new_a, new_b)
    return computed(f"{law.describe()} clamped to [{lo}, {hi}]")


def _erfinv(law: RecordedLaw) -> RecordedLaw:
    """erfinv of U(p, q) ⊂ [−1, 1]: erf(x) = 2Φ(x√2) − 1, so erfinv(U) = Z/√2 with Z the standard
    normal truncated to [√2·erfinv(p), √2·erfinv(q)]."""
    if law.kind != "uniform" or not -1.0 <= law.a < law.b <= 1.0:
        return computed(f"erfinv of {law.describe()}")
    ends = [
        -math.inf if p <= -1 else math.inf if p >= 1 else _N.inv_cdf((p + 1) / 2) / math.sqrt(2) for p in (law.a, law.b)
    ]
    return _trunc(0.0, 1 / math.sqrt(2), ends[0], ends[1])


def fold(op: str, law: RecordedLaw, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> RecordedLaw | None:
    """The law after the in-place operation `op` (its name: `mul_`, `normal_`, …) with `args` (the
    target first) acting on `law`; None for an operation that draws or sets a whole new law
    outside this table (the caller records it as computed)."""
    rest = args[1:]
    first = rest[0] if rest else None
    if op in _SCALE:
        s = _number(first if first is not None else kwargs.get("other"))
        if s is None:
            return computed(f"{op} by a tensor")
        return law.scaled(s if _SCALE[op] > 0 else 1.0 / s) if s != 0 or _SCALE[op] > 0 else computed(f"{op}(0)")
    if op in _SHIFT:
        s = _number(first if first is not None else kwargs.get("other"))
        alpha = _number(kwargs.get("alpha", rest[1] if len(rest) > 1 else 1.0))
        if s is None or alpha is None:
            return computed(f"{op} of a tensor")
        return law.shifted(_SHIFT[op] * alpha * s)
    if op == "neg_":
        return law.scaled(-1.0)
    if op == "normal_":
        mean = _number(kwargs.get("mean", first if first is not None else 0.0))
        std = _number(kwargs.get("std", rest[1] if len(rest) > 1 else 1.0))
        return _normal(mean or 0.0, std or 0.0)
    if op == "uniform_":
        a = _number(kwargs.get("from", first if first is not None else 0.0))
        b = _number(kwargs.get("to", rest[1] if len(rest) > 1 else 1.0))
        return _uniform(a or 0.0, 1.0 if b is None else b)
    if op == "fill_":
        v = _number(first if first is not None else kwargs.get("value"))
        return constant(v) if v is not None else computed("fill_ with a tensor")
    if op == "zero_":
        return constant(0.0)
    if op == "erfinv_":
        return _erfinv(law)
    if op in ("clamp_", "clip_", "clamp_min_", "clamp_max_"):
        lo = _number(kwargs.get("min", first if op != "clamp_max_" else None))
        hi = _number(kwargs.get("max", rest[1] if len(rest) > 1 else first if op == "clamp_max_" else None))
        return _clamp(law, lo, hi)
    return None
