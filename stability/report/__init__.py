"""Stage 6 (Verdicts → report): the terminal table, JSON, JUnit, HTML pages and their plots."""
