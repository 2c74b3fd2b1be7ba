"""Which devices a run uses, in one place: `--device` / `--stability-device` / a strategy's
`device` (cpu, cuda, auto, all) → devices.

- `cpu`, `cuda`: that device;
- `auto`: cuda when this machine has it, else cpu;
- `all`: one run per device, cpu and cuda (`stability check` and the pytest plugin skip the cuda
  run, with the reason, where this machine has no CUDA).

A spec's drawn cases (`case_devices`) keep to the devices its `space.device` lists when the
choice is `auto` or `all`.
"""

from __future__ import annotations

from stability.spec.schema import Spec

__all__ = ["CHOICES", "cuda_available", "resolve_devices", "case_devices"]

CHOICES = ("cpu", "cuda", "auto", "all")


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_devices(choice: str | None, *, available: bool = False) -> list[str]:
    """The devices a run with this choice uses (None is `auto`); with `available`, `all` keeps only
    the devices this machine has (`stability check` drops the cuda run and says so, the pytest
    plugin keeps it as a skipped item)."""
    if choice in (None, "auto"):
        return ["cuda"] if cuda_available() else ["cpu"]
    if choice == "all":
        return ["cpu", "cuda"] if not available or cuda_available() else ["cpu"]
    return [choice]


def case_devices(spec: Spec, choice: str | None) -> list[str]:
    """The devices a strategy draws a spec's cases on: an explicit device as given; with `auto` or
    `all`, those of `space.device` this machine has (cpu when none is)."""
    if choice not in (None, "auto", "all"):
        return [choice]
    usable = [d for d in resolve_devices(choice) if d in spec.space.device and (d == "cpu" or cuda_available())]
    return usable or ["cpu"]
