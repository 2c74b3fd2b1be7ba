"""Stage 6: results shown: the terminal table, JSON, JUnit, HTML pages and their plots."""
