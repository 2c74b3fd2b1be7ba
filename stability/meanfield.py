"""Mean-field predictions for plain and residual stacks (Poole et al. 2016, Schoenholz et al. 2017):
the public name of `stability.judge.meanfield`."""

from stability.judge.meanfield import *  # noqa: F403  (its __all__, re-exported)
from stability.judge.meanfield import __all__ as __all__
