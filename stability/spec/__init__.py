"""Stage 1: a spec file loaded and validated into a `Spec`, and the `Case`s of its space."""
