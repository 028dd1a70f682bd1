"""Headless Chromium through Selenium, for browser tests of ``scaffold ui`` (yours and ours) and its screenshots.

It drives Debian's ``chromium`` with ``chromium-driver`` (``apt-get install chromium chromium-driver``;
Playwright's own browser download is not needed) and ``pip install selenium``. The flags keep Chromium
off the network and out of the way of a root user's sandbox.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run")


@contextmanager
def headless_chromium(*, width: int = 1600, height: int = 1000, flags: Sequence[str] = ()) -> Iterator[Any]:
    """A Selenium WebDriver on headless Chromium (its console kept: ``driver.get_log("browser")``); ``flags``
    are added to Chromium's command line (``--host-resolver-rules=MAP name 127.0.0.1`` to test DNS names).

    Examples:
        >>> from scaffold.testing import headless_chromium, open_page
        >>> with headless_chromium() as driver:  # doctest: +SKIP
        ...     open_page(driver, "http://127.0.0.1:8700/#/runs")
        'runs'
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        raise FileNotFoundError("headless_chromium needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="scaffold-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}", *flags):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver: Any, url: str, timeout: float = 30.0) -> str:
    """Load a ``scaffold ui`` page and wait until it has drawn (``body[data-ready]``); returns which page it drew.

    Examples:
        >>> open_page(driver, "http://127.0.0.1:8700/#/run/rsa-0")  # doctest: +SKIP
        'run'
    """
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    return str(WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.dataset.ready")))
