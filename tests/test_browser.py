"""The HTML reports in a real browser: headless Chromium (the operating system's package, driven
by Playwright; nothing is downloaded) opens the check report of a failing spec and the sweep
report, and every image must decode, the console must stay free of errors, and the failing case
and its bound must be visible. Skips, with the reason, where Chromium or Playwright is absent."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spec_support import SPECS

from stability.cli import main

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="no Chromium: .ci/run installs Debian's `chromium` (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)"
    )
    with sync_api.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield context
        finally:
            context.close()


def open_report(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """The page at file://path, and every console error and page error it logged while loading."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, errors


def assert_images_decode(page: Any) -> int:
    """Every <img> has finished loading and decoded to a non-empty bitmap; returns how many."""
    images = page.evaluate(
        "Promise.all(Array.from(document.images).map(img => img.decode().then(() => null, e => String(e))"
        ".then(err => ({alt: img.alt, complete: img.complete, width: img.naturalWidth, height: "
        "img.naturalHeight, err}))))"
    )
    assert images, "the page has no images"
    broken = [i for i in images if i["err"] or not i["complete"] or i["width"] == 0 or i["height"] == 0]
    assert not broken, f"images that do not decode: {broken}"
    return len(images)


def test_check_report_shows_the_failing_case_and_its_bound(tmp_path: Path, browser: Any) -> None:
    claim = (SPECS / "control_plain_sigmoid.toml").read_text().replace('expect = "violated"', 'expect = "holds"')
    spec = tmp_path / "sigmoid_claim.toml"
    spec.write_text(claim.replace('name = "control-plain-sigmoid"', 'name = "sigmoid-claim"'))
    assert main(["check", str(spec), "--profile", "ci", "-q", "--html", str(tmp_path / "report")]) == 1
    page, errors = open_report(browser, tmp_path / "report" / "index.html")
    assert assert_images_decode(page) == 2
    row = page.locator("table.verdicts tr.failed").first
    assert row.is_visible()
    text = row.inner_text()
    assert "gradient_arrival" in text and "[1e-06, 10]" in text and "depth=" in text
    detail = page.locator("table.verdicts tr.detail").first
    assert detail.is_visible() and "reproduce: stability check" in detail.inner_text()
    assert not errors, errors


@pytest.mark.slow  # a sweep, then its report in headless Chromium
def test_sweep_report_shows_heatmaps_and_budgets(tmp_path: Path, browser: Any) -> None:
    args = [
        "sweep",
        str(SPECS / "plain_tanh_mlp.toml"),
        "--over",
        "depth=2,8,32",
        "--over",
        "sigma_w2=0.5,3",
        "--seeds",
        "1",
        "--serial",
        "-q",
    ]
    assert main([*args, "--db", str(tmp_path / "r.sqlite"), "--html", str(tmp_path / "sweep")]) == 0
    page, errors = open_report(browser, tmp_path / "sweep" / "index.html")
    assert assert_images_decode(page) == 2  # gradient and variance phase diagrams
    budgets = page.locator("table.budgets")
    assert budgets.is_visible()
    text = budgets.inner_text()
    assert "gradient_arrival" in text and "sigma_w2=0.5" in text and "reproduce: stability sweep" in text
    assert not errors, errors
