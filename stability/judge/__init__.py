"""Stage 4: measurements judged against the invariants and the laws they come from."""
