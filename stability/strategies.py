"""Hypothesis strategies over a spec's search space, for users' own tests: the public name of
`stability.run.strategies` (`cases`, `networks`, `DrawnNetwork`, `integers_in`)."""

from stability.run.strategies import *  # noqa: F403  (its __all__, re-exported)
from stability.run.strategies import __all__ as __all__
