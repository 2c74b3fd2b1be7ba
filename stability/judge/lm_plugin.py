"""The plugin that registers the language-model invariants (stability.judge.lm_catalog) in every
process of a run: `stability check --plugin stability.judge.lm_plugin SPEC` (or
`STABILITY_PLUGINS=stability.judge.lm_plugin`, or the pytest ini option `stability_plugins`)."""

from __future__ import annotations

from stability.judge.lm_catalog import register_lm

register_lm()
