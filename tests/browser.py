"""What the browser tests check besides pages: console errors and blank screenshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def console_errors(driver: Any) -> list[str]:
    """The browser console's errors since the last call (warnings and info are left out)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def non_blank_share(png: Path) -> float:
    """The share of a screenshot's pixels that differ from its most common colour (the background)."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=image.width * image.height) or []
    background = max(colours)[0] if colours else 0
    return 1 - background / (image.width * image.height)
