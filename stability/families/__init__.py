"""Stage 2: a case built into blocks: the harness's own families and a user's factory."""
