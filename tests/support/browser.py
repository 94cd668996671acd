"""A page as headless Debian chromium draws it: for the report's visual checks."""

from __future__ import annotations

import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(page, tmp_path, height: int = 1000):
    """The report as headless Debian chromium draws it, with no network (flags as the machine's
    probe found necessary on a closed network)."""
    from PIL import Image

    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size=1200,{height}", f"--screenshot={shot}",
         page.as_uri()],
        check=True, timeout=60, capture_output=True,
    )
    return Image.open(shot).convert("RGB")
