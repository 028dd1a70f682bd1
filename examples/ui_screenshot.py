"""The README's screenshot of ``scaffold ui``: a recorded RSA run (N=16, K=4, T=10) with one trace open.

Records ``scaffold.testing.sample_store`` (RSA and a vote on 12 problems, scripted answers) into a
temporary store, serves the viewer, opens run ``rsa-0`` in headless Chromium (Debian's, through Selenium),
clicks an aggregation of step 3, and saves the window as a palette PNG (under 200 KB) at ``--out``.

Usage: python examples/ui_screenshot.py [--out docs/ui-run.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scaffold.serve import ServeThread  # noqa: E402
from scaffold.testing import headless_chromium, open_page, sample_store  # noqa: E402
from scaffold.ui import create_ui_app  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui-run.png")
    args = parser.parse_args()
    from PIL import Image

    sample = sample_store(Path(tempfile.mkdtemp(prefix="scaffold-ui-shot-")) / "runs.db")
    raw = Path(tempfile.mkdtemp()) / "shot.png"
    with ServeThread(create_ui_app(sample.path)) as server, headless_chromium(width=1400, height=860) as driver:
        open_page(driver, server.url + "/#/run/rsa-0")
        driver.find_element("css selector", 'g.trace[data-trace="rsa-0/step3#2"]').click()
        driver.save_screenshot(str(raw))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.open(raw).convert("RGB").quantize(colors=64).save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
