"""Stage 4 (training): a Spec and a Case → a short optimizer run, and what it changed.

The probe judges a network before its first update; this module runs the first updates. A
*trainable* network is the family's blocks as the builder makes them for the case, between an
input layer (`embed`: the fixed-size input → `width` channels) and a readout (global average pool,
then a linear map to `train.outputs`). Boundary 0 is the embedding (the input of block 0),
boundary l the input of block l, boundary L the blocks' output; the readout's output is one more
boundary, "the output". Only the embed and the input shape depend on the layer kind
(`_EMBEDDINGS`, `_INPUT_SHAPES`), so a new input kind is one entry in each.

Everything is drawn from the case's seed (`derive_seed` streams: 0 the blocks, as the builder
does; 3 the inputs, 4 the teacher or labels, 5 the embed and readout, 6 the global RNG during the
run), every run is full-batch gradient descent on one fixed set, and the whole run sits inside
`torch.random.fork_rng`, on one CPU thread (`single_thread`): the same case replays bit-exactly
on the CPU with the same torch build, whatever the core count, and leaves the caller's global RNG
untouched.

Parametrisations (Yang et al. 2021, "Tensor Programs V", Table 3, in the base-width form of the
`mup` package): `sp` uses one learning rate η and the usual 1/fan_in init everywhere. `mup`
multiplies the readout's input by 1/m, m = width / base_width, and its init by √m (so the readout
weights have variance ∝ 1/fan_in², Table 3's output weights), and scales each parameter's
learning rate by how many of its fan dimensions grow with the width (found, as `mup` does, by
comparing shapes at base_width and at 2·base_width):

    parameter              SGD            Adam
    no growing dim         η              η
    one growing dim        η·m            η          (input weights, biases, norm gains, readout)
    two growing dims       η·m_out/m_in   η/m_in     (hidden weights)

At width = base_width µP and SP are the same network and the same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from stability.families.build import build, derive_seed, torch_dtype
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec, Train

__all__ = [
    "TrainModel",
    "TrainRun",
    "Task",
    "make_task",
    "trainable",
    "lr_scales",
    "reference_shapes",
    "fit",
    "relative_residuals",
    "train_case",
    "single_thread",
    "run_on",
    "trainable_params",
    "Shapes",
    "TEACHER_HIDDEN",
]

# derive_seed streams of the training run (0–2 belong to the builder and the probe).
_INPUT_STREAM, _TARGET_STREAM, _HEAD_STREAM, _GLOBAL_STREAM = 3, 4, 5, 6
#: Hidden units of the random tanh teacher of `task = "teacher"` (make_task).
TEACHER_HIDDEN = 32


# ----------------------------------------------------------------------------- the network


class Readout(nn.Module):
    """y = W·(pool(h)·mult) + b: mean over any spatial dims, then a linear map to the outputs.

    `mult` is 1 in SP and 1/m in µP (the `mup` package's MuReadout)."""

    def __init__(self, width: int, outputs: int, *, mult: float) -> None:
        super().__init__()
        self.linear = nn.Linear(width, outputs)
        self.mult = mult

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pooled = h.flatten(2).mean(dim=2) if h.dim() > 2 else h  # (B, C)
        out: torch.Tensor = self.linear(pooled * self.mult)  # (B, outputs)
        return out


@dataclass
class TrainModel:
    """The blocks of one case between an input layer and a readout, with per-parameter
    learning-rate multipliers (all 1 in SP)."""

    embed: nn.Module
    blocks: nn.Sequential
    readout: Readout
    lr_scale: dict[str, float] = field(default_factory=dict)

    def modules(self) -> nn.ModuleDict:
        return nn.ModuleDict({"embed": self.embed, "blocks": self.blocks, "readout": self.readout})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.readout(self.blocks(self.embed(x)))  # (B, outputs)
        return out

    def boundaries(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[h_0 (embedding), h_1, …, h_L (blocks' output), f (readout)]: L + 2 tensors."""
        hs = [self.embed(x)]
        for block in self.blocks:
            hs.append(block(hs[-1]))
        hs.append(self.readout(hs[-1]))
        return hs


def _embed_linear(d_in: int, width: int) -> nn.Module:
    return nn.Linear(d_in, width)


def _embed_conv(d_in: int, width: int) -> nn.Module:
    return nn.Conv2d(d_in, width, 3, padding=1)


#: layer kind → (input dim, width) → the input layer. A new input kind adds one entry here.
_EMBEDDINGS: dict[str, Callable[[int, int], nn.Module]] = {"linear": _embed_linear, "conv2d": _embed_conv}


def _shape_linear(spec: Spec, case: Case, n: int) -> tuple[int, ...]:
    return (n, _train(spec).input_dim)


def _shape_conv(spec: Spec, case: Case, n: int) -> tuple[int, ...]:
    s = case.spatial or DEFAULT_SIZE
    return (n, _train(spec).input_dim, s, s)


#: layer kind → the shape of the raw input set, (N, input_dim) or (N, input_dim, S, S).
_INPUT_SHAPES: dict[str, Callable[[Spec, Case, int], tuple[int, ...]]] = {
    "linear": _shape_linear,
    "conv2d": _shape_conv,
}


def _train(spec: Spec) -> Train:
    if spec.train is None:
        raise ValueError(f"{spec.path}: the spec has no [train] table")
    return spec.train


def _variance_init(module: nn.Module, gen: torch.Generator, *, scale: float = 1.0) -> None:
    """weight ~ N(0, scale²/fan_in), bias 0 (Table 3's 1/fan_in variance)."""
    weight, bias = module.weight, module.bias
    assert isinstance(weight, torch.Tensor)
    fan_in = weight[0].numel()
    with torch.no_grad():
        weight.copy_(torch.randn(weight.shape, generator=gen, dtype=torch.float64) * (scale / math.sqrt(fan_in)))
        if isinstance(bias, torch.Tensor):
            bias.zero_()


def _parts(spec: Spec, case: Case) -> tuple[nn.Module, nn.Sequential, Readout]:
    """Embed, blocks and readout of one case, in float64 on the CPU for the embed and readout
    until the final cast (so their values do not depend on the dtype's rounding)."""
    t = _train(spec)
    blocks = build(spec, dataclasses.replace(case, input_width=None)).blocks
    gen = torch.Generator().manual_seed(derive_seed(case.seed, _HEAD_STREAM))
    with torch.random.fork_rng(
        devices=[]
    ):  # the layers' default init draws from the global RNG; it is overwritten below
        embed = _EMBEDDINGS[spec.block.layer](t.input_dim, case.width).double()
        readout = Readout(case.width, t.outputs, mult=1.0).double()
    _variance_init(embed, gen)
    _variance_init(readout.linear, gen)
    dtype, device = torch_dtype(case.dtype), torch.device(case.device)
    embed.to(device=device, dtype=dtype)
    readout.to(device=device, dtype=dtype)
    return embed, blocks, readout


def _shapes(spec: Spec, case: Case, width: int) -> dict[str, torch.Size]:
    embed, blocks, readout = _parts(spec, dataclasses.replace(case, width=width, dtype="float32", device="cpu"))
    model = TrainModel(embed, blocks, readout)
    return {name: p.shape for name, p in model.modules().named_parameters()}


def lr_scales(
    shapes: dict[str, torch.Size], base: dict[str, torch.Size], delta: dict[str, torch.Size], *, optimizer: str
) -> dict[str, float]:
    """Per-parameter learning-rate multipliers of µP (Yang et al. 2021, Table 3; `mup`'s MuSGD
    and MuAdam). A fan dimension *grows* when its size differs between `base` and `delta`;
    m_out and m_in are the growing dims' size over their base size (dims 0 and 1 of a weight,
    dim 0 of a vector)."""
    scales: dict[str, float] = {}
    for name, shape in shapes.items():
        fans = [0, 1] if len(shape) >= 2 else ([0] if len(shape) == 1 else [])
        mult = {d: shape[d] / base[name][d] for d in fans if base[name][d] != delta[name][d]}
        if len(mult) == 2:  # hidden weights: SGD η·m_out/m_in, Adam η/m_in
            scales[name] = mult[0] / mult[1] if optimizer == "sgd" else 1.0 / mult[1]
        elif len(mult) == 1:  # input weights, biases, gains, the readout: SGD η·m, Adam η
            scales[name] = next(iter(mult.values())) if optimizer == "sgd" else 1.0
        else:
            scales[name] = 1.0
    return scales


Shapes = dict[str, torch.Size]


def reference_shapes(spec: Spec, case: Case) -> tuple[Shapes, Shapes]:
    """The parameter shapes at base_width and at 2·base_width (µP's base and delta models)."""
    t = _train(spec)
    return _shapes(spec, case, t.base_width), _shapes(spec, case, 2 * t.base_width)


def trainable(spec: Spec, case: Case, *, reference: tuple[Shapes, Shapes] | None = None) -> TrainModel:
    """The case's blocks between an input layer and a readout, parametrised as `train.parametrization`
    says. `reference`: `reference_shapes(spec, case)`, when the caller has it (it does not depend on the width)."""
    t = _train(spec)
    embed, blocks, readout = _parts(spec, case)
    model = TrainModel(embed, blocks, readout)
    if t.parametrization == "mup":
        m = case.width / t.base_width
        readout.mult = 1.0 / m
        with torch.no_grad():
            readout.linear.weight.mul_(math.sqrt(m))
        shapes = {name: p.shape for name, p in model.modules().named_parameters()}
        base, delta = reference if reference is not None else reference_shapes(spec, case)
        model.lr_scale = lr_scales(shapes, base, delta, optimizer=t.optimizer)
    return model


# ----------------------------------------------------------------------------- the task


@dataclass(frozen=True)
class Task:
    """A fixed training set: inputs (N, …) and targets, (N, outputs) floats for `teacher` (loss
    ½·mean((f − y)²)) or (N,) class indices for `labels` (cross-entropy)."""

    x: torch.Tensor
    y: torch.Tensor
    kind: str

    def loss(self, f: torch.Tensor) -> torch.Tensor:
        if self.kind == "teacher":
            return 0.5 * (f - self.y).pow(2).mean()
        return nn.functional.cross_entropy(f, self.y)


def make_task(spec: Spec, case: Case) -> Task:
    """The case's training set: x ~ N(0, 1) of the layer kind's input shape, and either a random
    teacher's outputs (a tanh MLP on the flattened input, standardised per output) or random labels."""
    t = _train(spec)
    gen = torch.Generator().manual_seed(derive_seed(case.seed, _INPUT_STREAM))
    shape = _INPUT_SHAPES[spec.block.layer](spec, case, t.samples)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)  # (N, d_in[, S, S])
    tgen = torch.Generator().manual_seed(derive_seed(case.seed, _TARGET_STREAM))
    dtype, device = torch_dtype(case.dtype), torch.device(case.device)
    if t.task == "labels":
        y = torch.randint(0, t.outputs, (t.samples,), generator=tgen)  # (N,)
        return Task(x.to(device=device, dtype=dtype), y.to(device), "labels")
    flat = x.flatten(1)  # (N, D)
    w1 = torch.randn(flat.shape[1], TEACHER_HIDDEN, generator=tgen, dtype=torch.float64) / math.sqrt(flat.shape[1])
    w2 = torch.randn(TEACHER_HIDDEN, t.outputs, generator=tgen, dtype=torch.float64) / math.sqrt(TEACHER_HIDDEN)
    y = torch.tanh(flat @ w1) @ w2  # (N, outputs)
    y = (y - y.mean(0)) / y.std(0).clamp_min(1e-12)
    return Task(x.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype), "teacher")


# ----------------------------------------------------------------------------- the run


@dataclass
class TrainRun:
    """The loss before each step and after the last (steps + 1 values, fewer when it diverged)."""

    losses: list[float]
    steps: int
    diverged_at: int | None  # the first step whose loss was NaN/inf
    seconds: float
    depth: int = 0
    residuals: list[float] = field(default_factory=list)  # ‖x_(l+1) − x_l‖/‖x_l‖ after the run

    @property
    def initial(self) -> float:
        return self.losses[0]

    @property
    def final(self) -> float:
        return self.losses[-1]


def _optimizer(kind: str, groups: list[dict[str, object]], lr: float) -> torch.optim.Optimizer:
    if kind == "sgd":  # plain gradient descent: no momentum, no weight decay
        return torch.optim.SGD(groups, lr=lr)
    return torch.optim.Adam(groups, lr=lr)


def fit(
    params: Sequence[tuple[torch.nn.Parameter, float]],
    loss_fn: Callable[[], torch.Tensor],
    *,
    optimizer: str,
    lr: float,
    steps: int,
    warmup: int = 0,
) -> TrainRun:
    """Full-batch training: `steps` updates of `params`, each with learning rate
    lr·scale·min(1, (t + 1)/warmup) (a linear warm-up over the first `warmup` steps, none when 0).
    Stops at the first non-finite loss."""
    t0 = time.perf_counter()
    by_scale: dict[float, list[torch.nn.Parameter]] = {}
    for p, s in params:  # one group per multiplier, so the optimizer's foreach kernels batch them
        by_scale.setdefault(s, []).append(p)
    groups: list[dict[str, object]] = [{"params": ps, "lr": lr * s, "scale": s} for s, ps in by_scale.items()]
    opt = _optimizer(optimizer, groups, lr)
    losses: list[float] = []
    for step in range(steps + 1):
        loss = loss_fn()
        value = float(loss.detach())
        losses.append(value)
        if not math.isfinite(value):
            return TrainRun(losses, step, step, time.perf_counter() - t0)
        if step == steps:
            break
        factor = min(1.0, (step + 1) / warmup) if warmup else 1.0
        for g in opt.param_groups:
            g["lr"] = lr * g["scale"] * factor
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    return TrainRun(losses, steps, None, time.perf_counter() - t0)


def trainable_params(model: TrainModel) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.modules().named_parameters() if p.requires_grad]


def run_on(spec: Spec, model: TrainModel, task: Task, case: Case) -> TrainRun:
    """`fit` the model to the task with the spec's optimizer settings, seeded from the case."""
    t = _train(spec)
    named = trainable_params(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(case.seed, _GLOBAL_STREAM))
        return fit(
            [(p, model.lr_scale.get(n, 1.0)) for n, p in named],
            lambda: task.loss(model.forward(task.x)),
            optimizer=t.optimizer,
            lr=t.lr,
            steps=t.steps,
            warmup=t.warmup,
        )


@contextlib.contextmanager
def single_thread(device: str) -> Iterator[None]:
    """Run the body on one CPU thread (then restore the count): a reduction split over threads
    rounds differently, so one thread makes a run's numbers independent of the machine's core
    count, and the small matrices of a training check gain nothing from more threads (on a
    loaded machine, spinning threads cost 20-40× the CPU time)."""
    if device != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def relative_residuals(model: TrainModel, x: torch.Tensor) -> list[float]:
    """‖h_(l+1) − h_l‖ / ‖h_l‖ for every block l (NaN where a block changes the shape): for a
    residual block with an identity skip this is the branch's relative output ‖F(x)‖/‖x‖."""
    with torch.no_grad():
        hs = model.boundaries(x)[:-1]
    out = []
    for a, b in zip(hs[:-1], hs[1:], strict=True):
        if a.shape != b.shape:
            out.append(math.nan)
            continue
        den = float(a.double().norm())
        out.append(float((b.double() - a.double()).norm()) / den if den > 0 else math.nan)
    return out


def train_case(spec: Spec, case: Case) -> TrainRun:
    """Train the case's network for `train.steps` steps; afterwards measure the blocks' relative
    residuals on the training set."""
    with single_thread(case.device):
        model = trainable(spec, case)
        task = make_task(spec, case)
        run = run_on(spec, model, task, case)
        run.depth = case.depth
        if run.diverged_at is None:
            run.residuals = relative_residuals(model, task.x)
    return run
