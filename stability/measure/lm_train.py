"""Stage 4 (training): a language-model run on the Markov token task, with the measurements that
show the instabilities of Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer
training instabilities") as they grow.

The model (`stability.families.lm_models.token_model`): for a `transformer` spec the case's blocks
between a token and position embedding and a readout (`LanguageModel`), for a `library` spec a
transformers causal LM from its config, for a `custom` spec the factory's own module from token ids
to logits; the same run trains all three. The loss is the next-token cross-entropy
over the scored positions (targets at positions ≥ k of an order-k chain, whose best loss is the
entropy rate; stability.measure.lm_task) plus z_loss·mean(log² Z) (PaLM, Chowdhery et al. 2022).

The optimizer is AdamW (β₁, β₂, ε, weight decay on the weights of two or more dimensions only:
`coupled` multiplies it by the step's learning rate, as torch.optim.AdamW does; `independent`
by the schedule's factor only, Wortsman et al.'s "independent" decay), with the gradient's global
norm clipped to train.clip, a linear warm-up over train.warmup steps and then a constant rate or
cosine decay to min_lr_ratio·lr at the last step. Each step trains on a fresh batch of
case.batch sequences of case.tokens tokens.

Recorded every train.record_every steps (and at the last and at a diverging step), without
keeping attention matrices: per layer the largest attention logit (the logits entering the
softmax, over the keys a query can see) and the attention entropy (the smallest head's), as
`stability.measure.lm_capture` captures them for the model's kind, the output log Z (mean,
max and min over the scored tokens), the gradient RMS before clipping, and per parameter group
the RMS of the step's update (`stability.measure.lm_records.LMRun`).

Causal for the whole run (`stability.families.lm_causal`): the built model, in eval and in train
mode, before the first step; the trained one again after the last step run; and the task itself,
the trained model's held-out loss per token against the chain's own on the same tokens. A model
that reads a later token is refused (SpecError, exit 2) with the numbers that show it.

Deterministic: derive_seed streams 0 the blocks (the builder's), 3 the training tokens, 4 the
chain, 5 the embeddings and readout, 6 the global RNG, 7 the held-out sequences; one CPU thread;
the caller's global RNG untouched. A case replays bit for bit.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn

from stability.families.build import derive_seed
from stability.families.lm_causal import check_causal, check_held_out
from stability.families.lm_models import (
    LanguageModel,
    TokenModel,
    language_model,
    named_groups,
    parameter_group,
    token_model,
)
from stability.measure.lm_capture import capture
from stability.measure.lm_records import PARAMETER_GROUPS, LMRun
from stability.measure.lm_task import MarkovChain, markov_chain
from stability.measure.train import single_thread
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec, Train

__all__ = ["LanguageModel", "lm_chain", "language_model", "lm_loss", "lr_factor", "parameter_group", "adamw", "lm_run"]

_TOKEN_STREAM, _CHAIN_STREAM, _HEAD_STREAM, _GLOBAL_STREAM, _EVAL_STREAM = 3, 4, 5, 6, 7


def _train(spec: Spec) -> Train:
    if spec.train is None or spec.train.task != "markov":
        raise ValueError(f'{spec.path}: the language-model run needs [train] with task = "markov"')
    return spec.train


def lm_chain(spec: Spec, case: Case) -> MarkovChain:
    t = _train(spec)
    return markov_chain(
        vocab=t.vocab, order=t.order, concentration=t.concentration, seed=derive_seed(case.seed, _CHAIN_STREAM)
    )


def lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, *, order: int, z_loss: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def adamw(model: nn.Module, t: Train, lr: float) -> torch.optim.AdamW:
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


def _rms(tensors: list[torch.Tensor]) -> float:
    n = sum(x.numel() for x in tensors)
    if n == 0:
        return math.nan
    return math.sqrt(sum(float(x.double().square().sum()) for x in tensors) / n)


def _token_losses(model: TokenModel, tokens: torch.Tensor, order: int) -> torch.Tensor:
    """(N, L) held-out tokens → (N·(L − k),): the cross-entropy of each scored token, in eval mode
    (the terms whose mean `lm_loss` takes, in the same order as `MarkovChain.log_likelihood`'s)."""
    was = model.module.training
    model.module.eval()
    with torch.no_grad():
        z = model.logits(tokens[:, :-1])[:, order - 1 :].flatten(0, 1)  # (N', V)
        if z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        y = tokens[:, order:].flatten()  # (N',)
        out: torch.Tensor = torch.logsumexp(z, dim=-1) - z.gather(1, y[:, None]).squeeze(1)
    model.module.train(was)
    return out


def _eval_loss(model: TokenModel, tokens: torch.Tensor, order: int) -> float:
    return float(_token_losses(model, tokens, order).mean())


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
        model = token_model(spec, case)
        check_causal(spec, case, model)  # a model that reads later tokens is refused before it trains
        model.module.train()
        held_out = chain.sample(
            t.eval_sequences, tokens + 1, torch.Generator().manual_seed(derive_seed(case.seed, _EVAL_STREAM))
        )
        run = LMRun(lr=lr, seed=case.seed, steps=t.steps, eps=t.eps, entropy_rate=chain.entropy_rate())
        run.oracle_eval = float(-chain.log_likelihood(held_out).mean())
        held_out = held_out.to(device)
        run.initial_eval = _eval_loss(model, held_out, t.order)
        opt = adamw(model.module, t, lr)
        groups = named_groups(model, PARAMETER_GROUPS)
        run.update_rms = {g: [] for g in PARAMETER_GROUPS}
        recorder = capture(model)
        gen = torch.Generator().manual_seed(derive_seed(case.seed, _TOKEN_STREAM))
        params = [p for p in model.module.parameters() if p.requires_grad]
        try:
            for step in range(t.steps if stop_at is None else min(stop_at, t.steps)):
                batch = chain.sample(case.batch, tokens + 1, gen).to(device)  # (B, T + 1)
                recording = step % t.record_every == 0 or step == t.steps - 1
                recorder.active = recording
                with recorder.forward():
                    logits = model.logits(batch[:, :-1])  # (B, T, V)
                recorder.active = False
                objective, ce, logz = lm_loss(logits, batch[:, 1:], order=t.order, z_loss=t.z_loss)
                loss = float(ce.detach())
                run.losses.append(loss)
                finite = math.isfinite(loss) and math.isfinite(float(objective.detach()))
                if not finite and not recording:  # measure the diverging forward too: the same batch, the same weights
                    recorder.active = True
                    with torch.no_grad(), recorder.forward():
                        model.logits(batch[:, :-1])
                    recorder.active = False
                if recording or not finite:
                    logit, ent = recorder.take()
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
                        run.update_rms[g].append(
                            _rms([p.detach() - b for (_, p), b in zip(ps, before[g], strict=True)])
                        )
        finally:
            run.attention_missing = recorder.missing if not any(run.max_logit) else ""
            recorder.remove()
        if run.diverged_at is None:  # again on the trained model, and by the task itself (lm_causal)
            ran = len(run.losses)
            check_causal(spec, case, model, steps=ran)
            losses = _token_losses(model, held_out, t.order)
            chain_losses = -chain.log_likelihood(held_out.cpu())
            check_held_out(spec, model, losses.cpu(), chain_losses, entropy_rate=run.entropy_rate, steps=ran)
            if stop_at is None or stop_at >= t.steps:
                run.final_eval = float(losses.mean())
                if not math.isfinite(run.final_eval):
                    run.diverged_at = t.steps
        run.seconds = time.perf_counter() - t0
    return run
