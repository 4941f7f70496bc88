"""Screenshots of the two report tiers for the README (docs/report-release.png, report-owner.png).

    python -m benchmarks.report_screenshots RELEASE.html OWNER.html [--chromium /usr/bin/chromium]

The HTML files are what ``GET /v1/jobs/{id}/report?format=html`` (and ``&tier=owner``) return;
the README's walkthrough says how they were produced. Needs Playwright and a system Chromium.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def screenshot(html: Path, out: Path, chromium: str, height: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": height})
            page.route("**/*", lambda route: route.abort())  # a report fetches nothing
            page.set_content(html.read_text(encoding="utf-8"), wait_until="load")
            page.screenshot(path=str(out), full_page=False)
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path)
    parser.add_argument("owner", type=Path)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--height", type=int, default=1600)
    args = parser.parse_args()
    screenshot(args.release, DOCS / "report-release.png", args.chromium, args.height)
    screenshot(args.owner, DOCS / "report-owner.png", args.chromium, args.height)


if __name__ == "__main__":
    main()
