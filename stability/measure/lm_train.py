"""Stage 4 (training): a language-model run on the Markov token task, with the measurements that
show the instabilities of Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer
training instabilities") as they grow.

The model: a token embedding E (V → C) plus a learned position embedding, the case's blocks
exactly as the builder makes them for a `transformer` (or token-input `custom`) spec, a final
norm of the block's kind for pre- and sandwich-norm stacks (GPT-2's ln_f), and a readout: its own
weights (untied, N(0, 1/C)) or the embedding's (tied, logits = h·Eᵀ/√C). With train.logit_softcap
the logits are capped z → cap·tanh(z/cap) (Gemma 2). The loss is the next-token cross-entropy
over the scored positions (targets at positions ≥ k of an order-k chain, whose best loss is the
entropy rate; stability.measure.lm_task) plus z_loss·mean(log² Z) (PaLM, Chowdhery et al. 2022).

The optimizer is AdamW (β₁, β₂, ε, weight decay on the weights of two or more dimensions only:
`coupled` multiplies it by the step's learning rate, as torch.optim.AdamW does; `independent`
by the schedule's factor only, Wortsman et al.'s "independent" decay), with the gradient's global
norm clipped to train.clip, a linear warm-up over train.warmup steps and then a constant rate or
cosine decay to min_lr_ratio·lr at the last step. Each step trains on a fresh batch of
case.batch sequences of case.tokens tokens.

Recorded every train.record_every steps (and at the last and at a diverging step), without
keeping attention matrices: per layer the largest attention logit (a forward pre-hook on each
`AttentionProbs`, i.e. the logits entering the softmax, over the keys a query can see) and the
attention entropy (a forward hook on its output; the smallest head's), the output log Z (mean,
max and min over the scored tokens), the gradient RMS before clipping, and per parameter group
the RMS of the step's update (`stability.measure.lm_records.LMRun`).

Deterministic: derive_seed streams 0 the blocks (the builder's), 3 the training tokens, 4 the
chain, 5 the embeddings and readout, 6 the global RNG, 7 the held-out sequences; one CPU thread;
the caller's global RNG untouched. A case replays bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch
from torch import nn

from stability.families.build import build, derive_seed, torch_dtype
from stability.families.transformer import AttentionProbs
from stability.measure.lm_records import PARAMETER_GROUPS, LMRun
from stability.measure.lm_task import MarkovChain, markov_chain
from stability.measure.train import single_thread
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec, Train

__all__ = ["LanguageModel", "AttentionRecorder", "lm_chain", "language_model", "lm_loss", "lr_factor", "parameter_group", "adamw", "lm_run"]

_TOKEN_STREAM, _CHAIN_STREAM, _HEAD_STREAM, _GLOBAL_STREAM, _EVAL_STREAM = 3, 4, 5, 6, 7


class LanguageModel(nn.Module):
    """tokens (B, T) → logits (B, T, V): embed + positions → blocks → final norm → readout."""

    def __init__(self, blocks: nn.Sequential, *, vocab: int, width: int, tokens: int, final_norm: nn.Module, tied: bool, softcap: float | None) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(tokens, width))
        self.blocks = blocks
        self.final_norm = final_norm
        self.readout = None if tied else nn.Linear(width, vocab, bias=False)
        self.softcap = softcap

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:t]  # (B, T, C)
        h = self.final_norm(self.blocks(h))  # (B, T, C)
        z: torch.Tensor
        if self.readout is None:
            z = h @ self.embed.weight.t() * (1.0 / math.sqrt(h.shape[-1]))  # (B, T, V), tied
        else:
            z = self.readout(h)  # (B, T, V)
        if self.softcap is not None:
            z = self.softcap * torch.tanh(z / self.softcap)
        return z


def _train(spec: Spec) -> Train:
    if spec.train is None or spec.train.task != "markov":
        raise ValueError(f'{spec.path}: the language-model run needs [train] with task = "markov"')
    return spec.train


def lm_chain(spec: Spec, case: Case) -> MarkovChain:
    t = _train(spec)
    return markov_chain(vocab=t.vocab, order=t.order, concentration=t.concentration, seed=derive_seed(case.seed, _CHAIN_STREAM))


def _final_norm(spec: Spec, width: int) -> nn.Module:
    """GPT-2's ln_f after a pre- or sandwich-norm stack of the norm's kind (the loader admits
    transformer blocks only: stability.spec.lm_keys)."""
    if spec.block.norm_position == "post":
        return nn.Identity()
    if spec.block.norm == "layer":
        return nn.LayerNorm(width)
    if spec.block.norm == "rms":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.Identity()


def language_model(spec: Spec, case: Case) -> LanguageModel:
    """The case's blocks inside the language model; the embeddings N(0, 1) and the untied readout
    N(0, 1/C), drawn in float64 from stream 5 before the cast to the case's dtype."""
    t = _train(spec)
    tokens = case.tokens or DEFAULT_SIZE
    blocks = build(spec, dataclasses.replace(case, input_width=None)).blocks
    with torch.random.fork_rng(devices=[]):  # the layers' default init draws from the global RNG; it is overwritten below
        model = LanguageModel(blocks, vocab=t.vocab, width=case.width, tokens=tokens, final_norm=_final_norm(spec, case.width), tied=t.tied, softcap=t.logit_softcap)
    gen = torch.Generator().manual_seed(derive_seed(case.seed, _HEAD_STREAM))
    with torch.no_grad():
        model.embed.weight.copy_(torch.randn(model.embed.weight.shape, generator=gen, dtype=torch.float64))
        model.pos.copy_(torch.randn(model.pos.shape, generator=gen, dtype=torch.float64))
        if model.readout is not None:
            model.readout.weight.copy_(torch.randn(model.readout.weight.shape, generator=gen, dtype=torch.float64) / math.sqrt(case.width))
    dtype, device = torch_dtype(case.dtype), torch.device(case.device)
    model.embed.to(device=device, dtype=dtype)
    model.pos.data = model.pos.data.to(device=device, dtype=dtype)
    model.final_norm.to(device=device, dtype=dtype)
    if model.readout is not None:
        model.readout.to(device=device, dtype=dtype)
    return model


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, *, order: int, z_loss: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, T, V) logits for targets (B, T) → (objective, cross-entropy, log Z of each scored token).
    Target t (the token after input t) is scored when t + 1 ≥ k; objective = CE + z_loss·mean(log² Z)."""
    z = logits[:, order - 1 :].flatten(0, 1)  # (N, V)
    if z.dtype in (torch.float16, torch.bfloat16):
        z = z.float()  # log Z and the loss in float32
    y = targets[:, order - 1 :].flatten()  # (N,)
    logz = torch.logsumexp(z, dim=-1)  # (N,)
    ce = (logz - z.gather(1, y[:, None]).squeeze(1)).mean()
    objective = ce + z_loss * logz.square().mean() if z_loss else ce
    return objective, ce, logz


def lr_factor(step: int, t: Train) -> float:
    """s_t: (t + 1)/warmup during the warm-up, then 1 (constant) or min + (1 − min)·½(1 + cos(π·p)),
    p = (t − warmup)/(steps − warmup − 1) going from 0 to 1 at the last step (cosine)."""
    if step < t.warmup:
        return (step + 1) / t.warmup
    if t.schedule == "constant":
        return 1.0
    span = t.steps - t.warmup - 1
    p = (step - t.warmup) / span if span > 0 else 1.0
    return t.min_lr_ratio + (1.0 - t.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


def parameter_group(name: str, module: nn.Module) -> str:
    """Which of PARAMETER_GROUPS a parameter belongs to, from its name in the LanguageModel and
    the module that holds it (norms and gains anywhere are `norm`)."""
    if name.startswith(("embed.", "pos")):
        return "embedding"
    if name.startswith("readout."):
        return "readout"
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or name.startswith("final_norm."):
        return "norm"
    if ".attn.fn." in name and ".q_norm." not in name and ".k_norm." not in name:
        return "attention"
    if ".mlp.fn." in name:
        return "mlp"
    return "norm"  # ReZero, SkipInit and LayerScale gains


def _named_groups(model: LanguageModel) -> dict[str, list[tuple[str, nn.Parameter]]]:
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {g: [] for g in PARAMETER_GROUPS}
    for mod_name, module in model.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                name = f"{mod_name}.{p_name}" if mod_name else p_name
                groups[parameter_group(name, module)].append((name, p))
    return groups


def adamw(model: LanguageModel, t: Train, lr: float) -> torch.optim.AdamW:
    """AdamW over two groups: the weights of two or more dimensions, decayed, and the rest (biases,
    gains, scalars), not. An `independent` decay λ is set as λ/lr, so that torch's η_t·(λ/η) = s_t·λ."""
    decayed: list[nn.Parameter] = []
    plain: list[nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (decayed if p.dim() >= 2 else plain).append(p)
    wd = t.weight_decay if t.decay == "coupled" else t.weight_decay / lr
    groups: list[dict[str, Any]] = [{"params": decayed, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=t.betas, eps=t.eps, foreach=False)


class AttentionRecorder:
    """Per layer, the largest attention logit over the visible keys (a forward pre-hook on each
    `AttentionProbs` inside the blocks) and the attention entropy in nats of its output (mean over
    the batch and the rows with two or more visible keys, then the smallest head's), while `active`."""

    def __init__(self, blocks: nn.Sequential) -> None:
        self.active = False
        self.max_logit: dict[int, float] = {}
        self.entropy: dict[int, float] = {}
        self._handles: list[Any] = []
        for i, block in enumerate(blocks):
            for module in block.modules():
                if isinstance(module, AttentionProbs):
                    self._handles.append(module.register_forward_pre_hook(self._pre(i)))
                    self._handles.append(module.register_forward_hook(self._post(i)))

    def _visible(self, module: nn.Module, t: int, device: torch.device) -> torch.Tensor:
        if getattr(module, "causal", False):
            return torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (T, T): key j ≤ query i
        return torch.ones(t, t, dtype=torch.bool, device=device)

    def _pre(self, index: int) -> Any:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            if not self.active:
                return
            s = args[0].detach()  # (B, H, T, T): the logits entering the softmax
            visible = self._visible(module, s.shape[-1], s.device)
            m = float(s.masked_fill(~visible, -math.inf).amax())
            self.max_logit[index] = max(self.max_logit.get(index, -math.inf), m)

        return hook

    def _post(self, index: int) -> Any:
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            if not self.active:
                return
            p = out.detach().double()  # (B, H, T, T)
            rows = self._visible(module, p.shape[-1], p.device).sum(dim=1) > 1  # (T,)
            ent = torch.special.entr(p).sum(dim=-1)[..., rows]  # (B, H, T')
            value = float(ent.mean(dim=(0, 2)).amin()) if bool(rows.any()) else math.nan
            self.entropy[index] = min(self.entropy.get(index, math.inf), value)

        return hook

    def take(self, layers: int) -> tuple[list[float], list[float]]:
        out = [self.max_logit.get(i, math.nan) for i in range(layers)], [self.entropy.get(i, math.nan) for i in range(layers)]
        self.max_logit, self.entropy = {}, {}
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _rms(tensors: list[torch.Tensor]) -> float:
    n = sum(x.numel() for x in tensors)
    if n == 0:
        return math.nan
    return math.sqrt(sum(float(x.double().square().sum()) for x in tensors) / n)


def _eval_loss(model: LanguageModel, tokens: torch.Tensor, order: int) -> float:
    was = model.training
    model.eval()
    with torch.no_grad():
        _, ce, _ = lm_loss(model(tokens[:, :-1]), tokens[:, 1:], order=order, z_loss=0.0)
    model.train(was)
    return float(ce)


def lm_run(spec: Spec, case: Case, *, lr: float | None = None, stop_at: int | None = None) -> LMRun:
    """Train the case's language model for train.steps steps at `lr` (default train.lr) and record
    what the module docstring lists. With `stop_at`, only the first stop_at steps run (the schedule
    and the records are the whole run's, so they are its prefix, bit for bit) and there is no final
    held-out loss."""
    t = _train(spec)
    lr = t.lr if lr is None else lr
    tokens = case.tokens or DEFAULT_SIZE
    device = torch.device(case.device)
    with single_thread(case.device), torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(case.seed, _GLOBAL_STREAM))
        t0 = time.perf_counter()
        chain = lm_chain(spec, case)
        model = language_model(spec, case)
        model.train()
        held_out = chain.sample(t.eval_sequences, tokens + 1, torch.Generator().manual_seed(derive_seed(case.seed, _EVAL_STREAM)))
        run = LMRun(lr=lr, seed=case.seed, steps=t.steps, eps=t.eps, entropy_rate=chain.entropy_rate())
        run.oracle_eval = float(-chain.log_likelihood(held_out).mean())
        held_out = held_out.to(device)
        run.initial_eval = _eval_loss(model, held_out, t.order)
        opt = adamw(model, t, lr)
        groups = _named_groups(model)
        run.update_rms = {g: [] for g in PARAMETER_GROUPS}
        recorder = AttentionRecorder(model.blocks)
        layers = len(model.blocks)
        gen = torch.Generator().manual_seed(derive_seed(case.seed, _TOKEN_STREAM))
        params = [p for p in model.parameters() if p.requires_grad]
        try:
            for step in range(t.steps if stop_at is None else min(stop_at, t.steps)):
                batch = chain.sample(case.batch, tokens + 1, gen).to(device)  # (B, T + 1)
                recording = step % t.record_every == 0 or step == t.steps - 1
                recorder.active = recording
                objective, ce, logz = lm_loss(model(batch[:, :-1]), batch[:, 1:], order=t.order, z_loss=t.z_loss)
                recorder.active = False
                loss = float(ce.detach())
                run.losses.append(loss)
                finite = math.isfinite(loss) and math.isfinite(float(objective.detach()))
                if not finite and not recording:  # measure the diverging forward too: the same batch, the same weights
                    recorder.active = True
                    with torch.no_grad():
                        model(batch[:, :-1])
                    recorder.active = False
                if recording or not finite:
                    logit, ent = recorder.take(layers)
                    lz = logz.detach().double()
                    run.recorded.append(step)
                    run.step_lr.append(lr * lr_factor(step, t))
                    run.max_logit.append(logit)
                    run.entropy.append(ent)
                    run.logz_mean.append(float(lz.mean()))
                    run.logz_max.append(float(lz.max()))
                    run.logz_min.append(float(lz.min()))
                if not finite:
                    run.diverged_at = step
                    run.grad_rms.append(math.nan)
                    for g in PARAMETER_GROUPS:
                        run.update_rms[g].append(math.nan)
                    break
                opt.zero_grad(set_to_none=True)
                objective.backward()  # type: ignore[no-untyped-call]
                if recording:
                    run.grad_rms.append(_rms([p.grad for p in params if p.grad is not None]))
                    before = {g: [p.detach().clone() for _, p in ps] for g, ps in groups.items()}
                if t.clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, t.clip, foreach=False)
                for group in opt.param_groups:
                    group["lr"] = lr * lr_factor(step, t)
                opt.step()
                if recording:
                    for g, ps in groups.items():
                        run.update_rms[g].append(_rms([p.detach() - b for (_, p), b in zip(ps, before[g], strict=True)]))
        finally:
            recorder.remove()
        if run.diverged_at is None and (stop_at is None or stop_at >= t.steps):
            run.final_eval = _eval_loss(model, held_out, t.order)
            if not math.isfinite(run.final_eval):
                run.diverged_at = t.steps
        run.seconds = time.perf_counter() - t0
    return run
