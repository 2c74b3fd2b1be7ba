"""Stages 1 and 2 of the pipeline (spec → Case): a spec file loaded
and validated into a `Spec`, and the `Case`s of its space."""
