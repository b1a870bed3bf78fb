"""The console tests' browser: Debian's Chromium (``/usr/bin/chromium``, from apt) driven by Playwright
through its executable path, never a browser that ``playwright install`` downloads."""
from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
# Assertions poll the page until they hold, bounded; the machine is shared, so the bound is generous.
expect.set_options(timeout=20_000)


@pytest.fixture
def browser():
    assert Path(CHROMIUM).exists(), "the browser tests need Debian's chromium (apt-get install chromium)"
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root (CI), where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
