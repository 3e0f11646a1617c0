"""The built site in a real browser: Debian's chromium, headless, driven by Playwright.

The site must work offline, so every request a page makes is recorded and any that
leaves 127.0.0.1 fails the test. Screenshots land in site-screenshots/ (git-ignored).

Without /usr/bin/chromium the test skips with the reason, unless
LLMSERVE_REQUIRE_BROWSER=1 (as CI sets it) makes that a failure.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = ROOT / "site-screenshots"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site_url(built_site):
    handler = functools.partial(QuietHandler, directory=str(built_site.site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        reason = "needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
        if os.environ.get("LLMSERVE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LLMSERVE_REQUIRE_BROWSER=1 but the browser test {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, site_url):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site_url.rstrip("/"))
    page = context.new_page()
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    yield page
    outside = [
        u
        for u in page.requests
        if urlparse(u).scheme not in ("data", "blob") and urlparse(u).hostname != "127.0.0.1"
    ]
    context.close()
    assert outside == [], f"the site made requests outside 127.0.0.1: {outside}"


def test_home_map_topic_needs_and_search(page, site_url):
    page.goto(site_url)
    topics = page.locator("svg.stage-map g.stage-map-topic")
    assert topics.count() == 24
    written = page.locator("svg.stage-map a g.stage-map-topic.written")
    assert written.count() >= 1
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "home.png"), full_page=True)

    slug = written.first.get_attribute("data-slug")
    # A title wrapped over several <tspan> lines reads back without the spaces between them.
    title = " ".join(page.locator(f'svg.stage-map g[data-slug="{slug}"] tspan').all_text_contents())
    written.first.click()
    page.wait_for_load_state("networkidle")
    assert f"/{slug}/" in page.url
    heading = page.locator("h1").first.inner_text().strip().removesuffix("¶")
    assert heading == " ".join(title.split())
    page.screenshot(path=str(SCREENSHOTS / "topic.png"), full_page=True)

    needs = page.locator(".admonition.abstract")
    assert needs.locator(".admonition-title").inner_text().strip() == "Needs"
    for href in needs.locator("a").evaluate_all("links => links.map(a => a.href)"):
        assert page.request.get(href).status == 200, href

    page.goto(site_url)
    page.wait_for_load_state("networkidle")  # the search worker has its index
    page.keyboard.press("/")
    words = title.split()
    page.locator("input.md-search__input").press_sequentially(f"{words[0]} {words[-1]}", delay=30)
    result = page.locator(f'.md-search-result__item a[href*="{slug}"]').first
    result.wait_for(timeout=15_000)
    assert result.is_visible()


def test_copy_button_copies_runnable_code(page, site_url, built_site):
    """A pycon block's copy button gives code without prompts or output."""
    with_pycon = [
        p
        for p in sorted(built_site.site.glob("**/index.html"))
        if 'class="language-pycon' in p.read_text(encoding="utf-8")
    ]
    assert with_pycon, "no page has a pycon block to try the copy button on"
    url = site_url + with_pycon[0].parent.relative_to(built_site.site).as_posix() + "/"
    page.goto(url)
    block = page.locator("div.language-pycon").first
    shown = block.locator("code").inner_text()
    block.hover()
    block.locator('button[data-md-type="copy"]').click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert ">>>" in shown and ">>>" not in copied and "..." not in re.findall(r"^\.\.\. ", copied)
    statements = [line[4:] for line in shown.splitlines() if line.startswith((">>> ", "... "))]
    # Output lines leave a blank line behind, harmless in a script or at a prompt.
    assert [line for line in copied.splitlines() if line.strip()] == statements
