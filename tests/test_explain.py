"""`stability explain`: stability/report/explain.py through the CLI, as a user runs it."""

from __future__ import annotations

import pytest

from stability.cli import main
from stability.errors import UsageError
from stability.judge.references import REFERENCES
from stability.report.explain import explain_text, known_invariants
from stability.spec.registry import INVARIANTS as REGISTRY

INVARIANTS = REGISTRY.names()


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def test_every_invariant_has_an_explanation() -> None:
    assert set(known_invariants()) == set(INVARIANTS)


def test_without_a_name_lists_every_invariant_on_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    for name in INVARIANTS:
        (line,) = [line for line in out.splitlines() if line.strip().startswith(name)]
        assert len(line.split(name, 1)[1].strip()) > 20  # a real one-line summary


@pytest.mark.parametrize("name", INVARIANTS)
def test_cli_prints_the_text_unchanged(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI prints through rich; a `[word]` in the text would be eaten as a style tag.
    assert main(["explain", name]) == 0
    assert _lines(capsys.readouterr().out) == _lines(explain_text(name))


@pytest.mark.parametrize("name", INVARIANTS)
def test_each_explanation_has_formula_causes_fixes_and_references(name: str) -> None:
    text = explain_text(name)
    for heading in ("What the harness computes", "Why it typically fails", "Usual fixes", "References"):
        assert f"\n{heading}\n" in text
    assert text.startswith(f"{name}: ")
    assert "arXiv:" in text or "AISTATS" in text


def test_gradient_arrival_states_the_ratio_and_the_fixes() -> None:
    text = explain_text("gradient_arrival")
    assert "g_0 / g_L" in text and "lo ≤ r ≤ hi" in text
    for fix in ('branch_init = ["zero"]', "gate_bias", "kaiming_normal", '"1/sqrt(depth)"', "He et al. 2016"):
        assert fix in text
    for ref in ("Deep Residual Learning", "Identity Mappings", "Highway Networks", "Delving Deep into Rectifiers"):
        assert ref in text


def test_variance_growth_states_the_classes() -> None:
    text = explain_text("variance_growth")
    assert "s_l / s_0" in text
    for growth in ("decaying", "bounded", "linear", "polynomial", "exponential"):
        assert growth in text
    assert "second_moment" in text and "1/sqrt(L)" in text


def test_identity_at_init_states_both_errors_and_the_orderings() -> None:
    text = explain_text("identity_at_init")
    assert "‖f(x) - x‖ / ‖x‖" in text and "‖∂L/∂x - ∂L/∂y‖ / ‖∂L/∂y‖" in text
    assert "ReZero" in text and "SkipInit" in text and "ReLU" in text


def test_all_references_are_cited_somewhere() -> None:
    cited = "\n".join(explain_text(n) for n in INVARIANTS)
    for ref in REFERENCES.values():
        assert ref.split('"')[1].split()[0] in cited


def test_unknown_name_is_a_usage_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "gradient_arival"]) == 2
    err = capsys.readouterr().err
    assert 'did you mean "gradient_arrival"' in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_unknown_name_raises_usage_error_from_the_api() -> None:
    with pytest.raises(UsageError, match="variance_growth"):
        explain_text("variance_grwoth")


def test_a_family_lacking_what_an_invariant_needs_is_listed_by_explain_and_refused_at_load() -> None:
    from stability import parse_spec
    from stability.errors import SpecError

    text = explain_text("lesion")
    assert "Not measured on (a spec declaring it for these families is refused)" in text
    assert "family 'dense': a dense layer adds channels, so it cannot be replaced by the identity" in text
    assert "Not measured on" not in explain_text("gradient_arrival")  # every family measures it
    with pytest.raises(
        SpecError, match=r"expect.lesion: is not measured on family 'dense': a dense layer adds channels"
    ):
        parse_spec('name = "d"\ndescription = "d"\nfamily = "dense"\n[space]\ndepth = 2\nwidth = 4\n[expect.lesion]\n')
    tokens = '[block]\nlayer = "tokens"\n[space]\ndepth = 2\nwidth = 4\ntokens = 3\n[expect.attention_entropy]\n'
    with pytest.raises(
        SpecError, match=r"expect.attention_entropy: is not measured on family 'preact': has no attention"
    ):
        parse_spec(f'name = "p"\ndescription = "d"\nfamily = "preact"\n{tokens}')
