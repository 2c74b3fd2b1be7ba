"""Stage 5 (Measurements → Verdicts): measurements judged against the invariants and the laws they come from."""
