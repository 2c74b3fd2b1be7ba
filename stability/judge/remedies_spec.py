"""What a remedy reads off a spec, asked by both catalogues of remedies (`stability.judge.remedies`,
`stability.judge.remedies_logits`): whether it is a transformer, and a library model's config keys
and values.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_transformer", "library_keys", "library_key", "library_value"]


def is_transformer(spec: Any) -> bool:
    return bool(spec.family == "transformer")


def library_keys(spec: Any) -> tuple[frozenset[str], bool]:
    """(the config keys a library spec's model takes, whether it takes any key: a **kwargs class);
    empty when the library does not import here."""
    if spec.family != "library":
        return frozenset(), False
    from stability.families.library import resolve
    from stability.families.library_lookup import config_keys

    try:
        keys, open_ended = config_keys(resolve(spec.options.model, file=spec.path))
    except Exception:  # the library is missing or the model does not resolve: the loader said so
        return frozenset(), False
    return frozenset(keys), open_ended


def library_key(spec: Any, candidates: tuple[str, ...]) -> str | None:
    """The first of `candidates` the library model's config takes (never guessed for a **kwargs class)."""
    keys, _ = library_keys(spec)
    return next((k for k in candidates if k in keys), None)


def library_value(spec: Any, key: str) -> Any:
    return spec.options.config.get(key) if spec.family == "library" else None
