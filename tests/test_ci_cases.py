"""`[probe] ci_cases` (stability/run/engine.py's search): the ci profile judges exactly the cases
named and draws none; dev tries them first, then searches; a case outside the space, an unknown
key, or ci_cases where the ci profile does not run is refused at load with the key named."""

from __future__ import annotations

import pytest

from stability import parse_spec
from stability.errors import SpecError
from stability.run.engine import RunOptions, run_spec

SPEC = (
    'name = "t"\ndescription = "t"\nfamily = "preact"\n[block]\nlayer = "linear"\n[space]\ndepth = [1, '
    "6]\nwidth = 8\nbatch = 4\n[expect.gradient_arrival]\n"
)


def _depths(probe: str, profile: str) -> list[int]:
    spec = parse_spec(SPEC + probe)
    result = run_spec(spec, RunOptions(profile=profile, case_timeout=None))
    assert all(r.met for r in result.results)
    return sorted(c.depth for c in result.cases)


def test_ci_judges_exactly_the_named_cases() -> None:
    assert _depths('[probe]\nci_cases = ["depth=2", "depth=5"]\n', "ci") == [2, 5]
    assert len(_depths("", "ci")) > 2  # without ci_cases the ci search draws its examples


def test_dev_tries_the_named_cases_first_then_searches() -> None:
    depths = _depths('[probe]\nci_cases = ["depth=2", "depth=5"]\n', "dev")
    assert {2, 5} <= set(depths) and len(depths) > 2


@pytest.mark.parametrize(
    ("probe", "key"),
    [
        ('ci_cases = ["depth=9"]', "probe.ci_cases[0]"),
        ('ci_cases = ["depth=2", "dpeth=3"]', "probe.ci_cases[1]"),
        ('ci_cases = ["depth=2"]\nprofiles = ["thorough"]', "probe.ci_cases"),
    ],
)
def test_a_bad_ci_case_is_refused_at_load(probe: str, key: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(SPEC + "[probe]\n" + probe + "\n")
    assert key in str(err.value)
