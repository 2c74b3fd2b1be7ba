"""Stage 3 (Case → blocks): a case built into blocks, by the harness's own families or a user's factory."""
