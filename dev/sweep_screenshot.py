"""Regenerate docs/sweep.png: the phase diagrams of a sweep report, as headless Chromium shows them.

    python dev/sweep_screenshot.py /tmp/sweep/index.html      # a report written by `stability sweep --html /tmp/sweep`

Needs Playwright for Python and the operating system's Chromium (Debian: `apt-get install chromium`);
nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "sweep.png")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=args.chromium, headless=True, args=ARGS, viewport={"width": 1400, "height": 900}
        )
        page = context.new_page()
        page.goto(args.report.resolve().as_uri(), wait_until="load")
        page.locator(".heatmaps").first.screenshot(path=str(args.out))
        context.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
