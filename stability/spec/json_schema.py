"""The JSON Schema of the spec format (`stability schema`), drawn from the models and the registries:
above both, so the models never ask the registry.
"""

from __future__ import annotations

from typing import Any

from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of the spec format (for editors and TOML language servers): every
    registered invariant's `[expect.NAME]` table, every family, and the families' own `[block]` keys."""
    schema = Spec.model_json_schema()
    schema["properties"].pop("path", None)
    schema["properties"].pop("options", None)
    block = schema.get("$defs", {}).get("Block")
    for fam in FAMILIES:
        if fam.options is None or block is None:
            continue
        own = fam.options.model_json_schema()
        for key, prop in own.get("properties", {}).items():
            block["properties"].setdefault(
                key,
                {
                    **prop,
                    "description": f"family '{fam.name}' only"
                    + (f": {prop['description']}" if prop.get("description") else ""),
                },
            )
        for name, definition in own.get("$defs", {}).items():
            schema.setdefault("$defs", {}).setdefault(name, definition)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "stability spec"
    schema["description"] = (
        "A stability spec file: the architecture, its search space and the invariants it must satisfy."
    )
    return schema
