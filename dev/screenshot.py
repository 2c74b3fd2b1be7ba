"""Regenerate docs/report.png: the HTML report of the shipped specs, as a browser shows it.

    python dev/screenshot.py                 # check specs/ (ci profile), then screenshot
    python dev/screenshot.py --reuse         # screenshot an existing /tmp/report/index.html

Needs the `stability` command and a headless Chromium (Debian: `apt-get install chromium`).
The check's exit code 1 (some expectation not met) still yields a report and a screenshot; a
bad spec or bad usage (exit 2) stops here.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MAX_BYTES = 600_000


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    sys.exit(
        f"screenshot.py: no headless browser found (tried {', '.join(BROWSERS)}); install one, e.g. `apt-get "
        "install chromium`"
    )


def _check(specs: str, html_dir: Path, profile: str) -> None:
    cmd = ["stability", "check", specs, "--profile", profile, "--html", str(html_dir), "--quiet"]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc not in (0, 1):
        sys.exit(f"screenshot.py: `{' '.join(cmd)}` exited with {rc}; fix that first")


def _screenshot(browser: str, page: Path, out: Path, size: str) -> None:
    with tempfile.TemporaryDirectory(prefix="stability-chromium-") as profile_dir:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile_dir}",
            f"--window-size={size}",
            "--hide-scrollbars",
            f"--screenshot={out}",
            page.resolve().as_uri(),
        ]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _shrink(out: Path) -> None:
    """Re-encode with fewer colours when the PNG is over MAX_BYTES (needs Pillow, which matplotlib brings)."""
    if out.stat().st_size <= MAX_BYTES:
        return
    try:
        from PIL import Image
    except ImportError:
        print(f"screenshot.py: {out} is {out.stat().st_size} bytes; install Pillow to shrink it", file=sys.stderr)
        return
    with Image.open(out) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--specs", default="specs", help="spec folder or file to check (default specs)")
    p.add_argument("--profile", default="ci", help="search profile (default ci)")
    p.add_argument(
        "--html-dir", default="/tmp/report", type=Path, help="where the report is written (default /tmp/report)"
    )
    p.add_argument(
        "--out", default=ROOT / "docs" / "report.png", type=Path, help="the PNG to write (default docs/report.png)"
    )
    p.add_argument("--size", default="1400,2000", help="browser window WIDTH,HEIGHT (default 1400,2000)")
    p.add_argument("--reuse", action="store_true", help="screenshot the existing report instead of running the check")
    args = p.parse_args(argv)

    browser = _browser()
    if not args.reuse:
        _check(args.specs, args.html_dir, args.profile)
    page = args.html_dir / "index.html"
    if not page.is_file():
        sys.exit(f"screenshot.py: {page} does not exist; run without --reuse")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _screenshot(browser, page, args.out, args.size)
    _shrink(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
