"""What is known of a deviation `stability scan` finds: the triage file (default the shipped
`scan_triage.toml` beside this module), one `[[known]]` table per known deviation:

```toml
[[known]]
library = "transformers"            # the library
model = "EfficientNetModel"         # the model's name (shell patterns allowed)
parameter = "*_bn.weight"           # the parameter group (shell patterns allowed)
verdict = "bug"                     # "bug" or "intended"
source = "huggingface/transformers#NNNN"  # the upstream issue or fix, or where the intended init is declared
note = "BatchNorm weights drawn from N(0, 0.02²) instead of ones since 4.54.0"
```

A deviation is **triaged** when an entry matches its library, model and parameter group; the scan's
exit code fails only on the others (`untriaged`), so a nightly scan fails on a new deviation and not
on a known one. An "intended" verdict names the declaration that makes it so; the rule row that
encodes it goes into `init_rules.toml`, after which the scan finds no deviation there at all. Bad
input (a file that does not read, an entry without its keys or with another verdict) is one line,
exit 2.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from stability.errors import UsageError

__all__ = ["Known", "TRIAGE_FILE", "load_triage", "triaged"]

TRIAGE_FILE = "scan_triage.toml"
_KEYS = ("library", "model", "parameter", "verdict", "source")


@dataclass(frozen=True, kw_only=True)
class Known:
    """One known deviation (the module docstring)."""

    library: str
    model: str
    parameter: str
    verdict: Literal["bug", "intended"]
    source: str
    note: str = ""

    def matches(self, library: str, model: str, parameter: str) -> bool:
        return (
            self.library == library
            and fnmatch.fnmatchcase(model, self.model)
            and fnmatch.fnmatchcase(parameter, self.parameter)
        )


def load_triage(path: str | Path | None = None) -> tuple[Known, ...]:
    """The entries of the triage file `path` (default: the shipped one)."""
    try:
        if path is None:
            text = resources.files("stability.judge").joinpath(TRIAGE_FILE).read_text(encoding="utf-8")
            shown = f"stability/judge/{TRIAGE_FILE}"
        else:
            text = Path(path).read_text(encoding="utf-8")
            shown = str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--triage {path}: cannot be read ({exc}); give a TOML file of [[known]] tables") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--triage {shown}: is not valid TOML ({exc}); fix that line") from None
    out: list[Known] = []
    for i, entry in enumerate(data.get("known", [])):
        where = f"{shown}: known[{i}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: is not a table; write [[known]] with {', '.join(_KEYS)}")
        missing = [k for k in _KEYS if not isinstance(entry.get(k), str) or not entry.get(k)]
        if missing:
            raise UsageError(f"{where}: {missing[0]} is missing; every entry names {', '.join(_KEYS)}")
        if entry["verdict"] not in ("bug", "intended"):
            raise UsageError(f'{where}: verdict = {entry["verdict"]!r}; write "bug" or "intended"')
        extra = sorted(set(entry) - {*_KEYS, "note"})
        if extra:
            raise UsageError(f"{where}: {extra[0]} is not a key of an entry; the keys are {', '.join(_KEYS)}, note")
        out.append(
            Known(
                library=entry["library"],
                model=entry["model"],
                parameter=entry["parameter"],
                verdict=entry["verdict"],
                source=entry["source"],
                note=str(entry.get("note", "")),
            )
        )
    return tuple(out)


def triaged(known: tuple[Known, ...], library: str, model: str, parameter: str) -> Known | None:
    """The first entry that matches a deviation, or None: untriaged."""
    return next((k for k in known if k.matches(library, model, parameter)), None)
