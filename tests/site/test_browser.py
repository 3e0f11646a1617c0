"""The built site in a real browser: Debian's chromium, headless, driven by Playwright.

The site must work offline, so every request a page makes is recorded and any that
leaves 127.0.0.1 fails the test. Screenshots land in site-screenshots/ (git-ignored).

Without /usr/bin/chromium the test skips with the reason, unless
LLMSERVE_REQUIRE_BROWSER=1 (as CI sets it) makes that a failure.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import urlopen

import pytest

from conftest import NODE, run_node

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import curriculum  # noqa: E402  (the stage graph the site is built from)

CURRICULUM = curriculum.load()
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
# The home page draws the stage map in two layouts and shows the one that fits its width.
MAP = 'svg.stage-map[data-layout="columns"]'  # a desktop's
STACKED_MAP = 'svg.stage-map[data-layout="stacked"]'  # a phone's

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
    topics = page.locator(f"{MAP} g.stage-map-topic")
    assert topics.count() == len(CURRICULUM.topics)
    written = page.locator(f"{MAP} a g.stage-map-topic.written")
    assert written.count() == len(curriculum.written_pages(CURRICULUM, ROOT / "docs"))
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "home.png"), full_page=True)

    slug = written.first.get_attribute("data-slug")
    # A title wrapped over several <tspan> lines reads back without the spaces between them.
    title = " ".join(page.locator(f'{MAP} g[data-slug="{slug}"] tspan').all_text_contents())
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


def press_tab_until(page, action: str, limit: int = 200) -> None:
    """Move the keyboard focus with Tab alone until it reaches the control `action`."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.action") == action:
            return
    raise AssertionError(f"Tab never reached the {action!r} control")


def map_state(page, slug: str, layout: str = MAP) -> str:
    node = page.locator(f'{layout} g.stage-map-topic[data-slug="{slug}"]')
    return node.locator("text.progress-mark").text_content().split()[-1]


def test_progress_by_keyboard_survives_reload_reset_and_import(page, site_url, tmp_path):
    """Mark stage 1 done, see stage 2 open up, reload, export, reset, import: keys only."""
    topics = json.loads((page.request.get(site_url + "javascripts/curriculum.json")).text())
    topics = topics["topics"]
    first = [t for t in topics if t["stage"] == 1]
    second = [t for t in topics if t["stage"] == 2]
    assert len(first) == 1 and len(second) == 2

    page.goto(site_url)
    panel = page.locator("#progress-panel")
    panel.wait_for()
    next_up = lambda: panel.locator("li a").all_inner_texts()  # noqa: E731
    assert next_up() == [first[0]["title"]]
    assert map_state(page, first[0]["slug"]) == "Ready"
    assert {map_state(page, t["slug"]) for t in second} == {"Locked"}
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "progress-new-reader.png"), full_page=True)
    # Focus on a locked topic (as Tab would) shows, under the map, which needs are not done.
    page.locator(f'{MAP} a:has(g[data-slug="{second[0]["slug"]}"])').focus()
    hint = page.locator(".progress-hint").inner_text()
    assert f"{second[0]['title']}: Locked (needs {first[0]['title']})" in hint

    # A locked page opens as usual and says which needs are not done.
    page.goto(site_url + second[0]["url"])
    control = page.locator(".progress-control")
    control.wait_for()
    assert "Locked" in control.inner_text() and first[0]["title"] in control.inner_text()
    assert page.locator("h1").first.is_visible()

    page.goto(site_url + first[0]["url"])
    page.locator(".progress-control").wait_for()
    press_tab_until(page, "toggle")
    page.keyboard.press("Enter")
    assert "Done" in page.locator(".progress-control .progress-status").inner_text()
    assert page.evaluate("document.activeElement.dataset.action") == "toggle"
    in_nav = page.evaluate(
        "slug => [...document.querySelectorAll('nav.md-nav a.md-nav__link')]"
        ".filter(a => a.href.endsWith(`/${slug}/`)).map(a => a.innerText)",
        first[0]["slug"],
    )
    assert in_nav and all("Done" in text for text in in_nav), in_nav

    page.goto(site_url)
    panel.wait_for()
    assert sorted(next_up()) == sorted(t["title"] for t in second)
    assert {map_state(page, t["slug"]) for t in second} == {"Ready"}
    page.screenshot(path=str(SCREENSHOTS / "progress-stage-1-done.png"), full_page=True)
    page.reload()
    panel.wait_for()
    assert map_state(page, first[0]["slug"]) == "Done"
    assert sorted(next_up()) == sorted(t["title"] for t in second)

    press_tab_until(page, "export")
    with page.expect_download() as download:
        page.keyboard.press("Enter")
    saved = tmp_path / "progress.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["done"] == [first[0]["slug"]]

    press_tab_until(page, "reset")
    page.keyboard.press("Enter")
    assert "Progress reset" in panel.locator(".progress-message").inner_text()
    assert next_up() == [first[0]["title"]]
    assert map_state(page, first[0]["slug"]) == "Ready"

    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "llmserve-progress", "version": 1, "done": ["warp-drive"]}')
    for chosen, says in [(bad, "does not have: warp-drive"), (saved, "Imported: 1 topic done")]:
        press_tab_until(page, "import")  # the file field is reached by Tab like the buttons
        # What the operating system's file dialog would hand over (Space opens it; headless
        # Chromium does not always report that dialog, so the test gives the file directly).
        page.locator('[data-action="import"]').set_input_files(str(chosen))
        message = panel.locator(".progress-message")
        message.filter(has_text=says).wait_for()
    assert map_state(page, first[0]["slug"]) == "Done"
    assert sorted(next_up()) == sorted(t["title"] for t in second)


# Runs the simulator page's own computation under Node, for settings given as JSON.
SIMULATOR_RUNNER = r"""
const core = require(process.argv[1]);
const { settings, data } = JSON.parse(require("fs").readFileSync(0, "utf8"));
const r = core.runSettings(settings, data);
process.stdout.write(JSON.stringify({ steps: r.numSteps,
  preemptions: r.requests.reduce((n, m) => n + m.numPreemptions, 0) }));
"""


def test_scheduler_simulator_updates_as_a_slider_moves(page, site_url):
    """Move the KV blocks slider by keyboard: the numbers change to what the JS core gives."""
    assert NODE, "the simulator check runs its JavaScript core under Node (no `node` on PATH)"
    page.goto(site_url + "stage-7/scheduler-simulator/")
    sim = page.locator("#scheduler-sim")
    throughput = sim.locator("#sim-out-throughput")
    throughput.filter(has_text="tokens/s").wait_for()
    outputs = sim.locator("output[id^=sim-out]")
    before = outputs.all_inner_texts()
    assert sim.locator("#sim-out-preemptions").inner_text() == "0"

    slider = sim.locator("#sim-blocks")
    slider.focus()
    page.keyboard.press("Home")  # the fewest blocks the slider offers
    sim.locator('output[for="sim-blocks"]').filter(has_text="320").wait_for()
    page.wait_for_function("document.querySelector('#sim-out-preemptions').textContent !== '0'")
    after = outputs.all_inner_texts()
    assert all(text and text != "-" for text in after), after
    assert after != before
    assert sim.locator("#sim-error").inner_text() == ""
    assert "preemptions" in sim.locator("#sim-timeline-caption").inner_text()
    assert sim.locator("#sim-timeline path.sim-tokens").get_attribute("d").count("M") > 100
    SCREENSHOTS.mkdir(exist_ok=True)
    sim.screenshot(path=str(SCREENSHOTS / "scheduler-simulator.png"))

    defaults = {
        "rate": 10,
        "promptMedian": 1024,
        "promptSigma": 1,
        "outputMedian": 128,
        "outputSigma": 1,
        "tokenBudget": 2048,
        "maxNumSeqs": 256,
        "numBlocks": 320,
        "seed": 0,
    }
    data = json.loads(page.request.get(site_url + "javascripts/scheduler-sim.json").text())
    script = ROOT / "docs" / "javascripts" / "scheduler-sim.js"
    expected = run_node(SIMULATOR_RUNNER, script, {"settings": defaults, "data": data}, timeout=60)
    assert expected["preemptions"] > 0
    shown = sim.locator("#sim-out-steps").inner_text()
    assert shown.startswith(f"{expected['steps']:,} steps in "), (shown, expected)
    assert sim.locator("#sim-out-preemptions").inner_text() == f"{expected['preemptions']:,}"


def written_topics() -> dict[str, str]:
    return curriculum.written_pages(CURRICULUM, ROOT / "docs")


def test_a_topic_notebook_renders_offline_and_downloads(page, site_url, tmp_path):
    """The first topic's page links to its notebook (hooks/notebooks.py); the notebook's page
    shows its cells, the recorded outputs and the math, loads nothing from outside the site
    (the `page` fixture fails on any request that leaves 127.0.0.1), and its button gives the
    notebook's file, whose first cell installs the site's wheel."""
    written = written_topics()
    topic = next(t for t in CURRICULUM.topics if t.slug in written)
    page.goto(site_url + written[topic.slug].removesuffix(".md") + "/")
    page.get_by_role("link", name="its notebook").click()
    page.wait_for_load_state("networkidle")
    assert page.url.endswith(f"/notebooks/{topic.slug}/"), page.url
    assert page.locator("h1").first.inner_text().strip().removesuffix("¶") == topic.title
    code_cells = page.locator(".jp-CodeCell .jp-InputPrompt")  # one prompt a code cell
    assert code_cells.count() > 10
    assert page.locator(".jp-OutputArea-output").count() > 0
    if re.search(r"\$[^$\s]", (ROOT / "docs" / written[topic.slug]).read_text("utf-8")):
        assert page.locator("math").count() > 0, "the page's math is not drawn as MathML"
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "notebook.png"))

    with page.expect_download() as download:
        page.get_by_role("link", name="Download the notebook").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name == f"{topic.slug}.ipynb"
    notebook = json.loads(saved.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4 and notebook["metadata"]["kernelspec"]["language"] == "python"
    install = next(c for c in notebook["cells"] if c["cell_type"] == "code")["source"]
    assert install.startswith("%pip install ") and "/downloads/llmserve_ref-" in install
    assert sum(c["cell_type"] == "code" for c in notebook["cells"]) == code_cells.count()


# Every selector of a stylesheet, as Chromium parses it, split at its top-level commas.
SELECTORS = """css => {
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(css);
  const found = [];
  const walk = rules => {
    for (const rule of rules) {
      if (rule.selectorText) {
        let depth = 0, start = 0;
        const text = rule.selectorText;
        for (let i = 0; i <= text.length; i++) {
          const c = text[i];
          if (c === "(") depth++;
          else if (c === ")") depth--;
          else if ((c === "," && depth === 0) || i === text.length) {
            found.push(text.slice(start, i).trim());
            start = i + 1;
          }
        }
      }
      if (rule.cssRules) walk(rule.cssRules);
    }
  };
  walk(sheet.cssRules);
  return found;
}"""
# The selectors (of those given) that match an element of the page in some state: with
# their pseudo-classes, pseudo-elements and attribute tests taken off, which can only widen
# what a selector matches.
MATCHING = """selectors => selectors.filter(selector => {
  let loose = selector;
  for (let before = null; before !== loose; ) {
    before = loose;
    loose = loose.replace(/::?[-\\w]+(\\([^()]*\\))?/g, "").replace(/\\[[^\\]]*\\]/g, "");
  }
  loose = loose.replace(/(^|[\\s>+~])(?=[\\s>+~]|$)/g, "$1*");
  try {
    return document.querySelector(loose) !== null;
  } catch {
    return true;  // what cannot be checked counts as matching
  }
})"""
# The computed style of one element of each kind (tag, classes, its parent's, inline
# style) in the notebook, its ::before and ::after too; custom properties aside (what they
# set is here).
STYLES = """() => {
  const seen = {};
  for (const el of document.querySelectorAll(".jupyter-wrapper, .jupyter-wrapper *")) {
    const key = [el.tagName, el.getAttribute("class"), el.parentElement.getAttribute("class"),
                 el.getAttribute("style")].join("|");
    if (key in seen) continue;
    const parts = [];
    for (const pseudo of [null, "::before", "::after"]) {
      const style = getComputedStyle(el, pseudo);
      for (const name of style) {
        if (!name.startsWith("--")) parts.push(`${name}: ${style.getPropertyValue(name)}`);
      }
    }
    seen[key] = parts;
  }
  return seen;
}"""
RESTORE = """sheets => {
  for (const style of document.querySelectorAll("style[data-trimmed]")) {
    style.textContent = sheets[style.dataset.trimmed];
  }
}"""


@pytest.mark.audit  # about 2 minutes: nox -s site-audit runs it
def test_notebook_pages_look_as_with_jupyterlabs_whole_stylesheet(page, site_url, built_site):
    """hooks/notebook_css.py drops from each notebook page the JupyterLab CSS that cannot
    style it. Chromium checks it: on every notebook page, no selector dropped matches an
    element (in any state); on the three largest, with the whole stylesheets put back, every
    kind of element in the notebook has the same computed style (the pages are all made
    alike, by hooks/notebooks.py, and each of these takes some seconds)."""
    import notebook_css

    whole = {name: text for text, name in notebook_css.jupyterlab_css().items()}
    paths = sorted(built_site.site.glob("stage-*/notebooks/*/index.html"))
    assert len(paths) == len(written_topics())
    largest = sorted(paths, key=lambda p: p.stat().st_size)[-3:]
    found = []
    for path in paths:
        url = site_url + path.relative_to(built_site.site).as_posix().removesuffix("index.html")
        page.goto(url)
        page.wait_for_load_state("networkidle")
        trimmed = page.locator("style[data-trimmed]")
        names = trimmed.evaluate_all("styles => styles.map(s => s.dataset.trimmed)")
        assert names == ["index.css", "theme-light.css"], (url, names)
        kept = set()
        for css in trimmed.evaluate_all("styles => styles.map(s => s.textContent)"):
            kept |= set(page.evaluate(SELECTORS, css))
        dropped = {s for name in names for s in page.evaluate(SELECTORS, whole[name])} - kept
        assert len(dropped) > 1000, (url, len(dropped))  # it did drop most of them
        found += [f"{url}: dropped {s!r} matches" for s in page.evaluate(MATCHING, sorted(dropped))]
        if path not in largest:
            continue
        styled = page.evaluate(STYLES)
        page.evaluate(RESTORE, whole)
        restored = page.evaluate(STYLES)
        assert styled.keys() == restored.keys()
        found += [
            f"{url}: {key}: {sorted(set(restored[key]) - set(styled[key]))[:3]}"
            for key in styled
            if styled[key] != restored[key]
        ]
    assert found == [], f"{len(found)} differences:\n" + "\n".join(found[:40])


# --- Readable by everyone, on any screen ------------------------------------------------

AXE = ROOT / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
SCHEMES = {"light": "default", "dark": "slate"}  # the reader's preference -> Material's scheme


def axe_source() -> str:
    """axe-core's script (tests/axe, installed by `npm ci` in the tests session)."""
    if not AXE.is_file():
        reason = f"{AXE.relative_to(ROOT)} is missing: run `npm ci --prefix tests/axe`"
        if os.environ.get("LLMSERVE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LLMSERVE_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return AXE.read_text(encoding="utf-8")


def axe_violations(page, source: str) -> list[str]:
    """axe-core's WCAG 2.0/2.1 A and AA violations on the page as shown: a line per rule."""
    page.evaluate(source)
    result = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags},"
        " resultTypes: ['violations']})",
        WCAG_A_AA,
    )
    return [
        f"{v['id']} on {len(v['nodes'])} elements, e.g. "
        + "; ".join(" ".join(map(str, n["target"])) for n in v["nodes"][:3])
        for v in result["violations"]
    ]


def rgba(css: str) -> tuple[float, float, float, float]:
    """A computed CSS colour, "rgb(r, g, b)" or "rgba(r, g, b, a)", as numbers."""
    numbers = [float(x) for x in re.findall(r"[\d.]+", css)]
    return (*numbers[:3], numbers[3] if len(numbers) > 3 else 1.0)


def contrast(text: str, back: str, page_back: str) -> float:
    """WCAG's contrast ratio of colour `text` drawn on `back`, itself drawn on `page_back`."""

    def over(top, bottom):
        return [t * top[3] + b * (1 - top[3]) for t, b in zip(top[:3], bottom[:3], strict=True)]

    def luminance(rgb):
        c = [v / 255 for v in rgb]
        c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    under = over(rgba(back), rgba(page_back))
    ink = over(rgba(text), [*under, 1.0])
    light, dark = sorted([luminance(ink), luminance(under)], reverse=True)
    return (light + 0.05) / (dark + 0.05)


# Each visible text of the stage map with the fill it is drawn on: its box, or the page.
MAP_TEXTS = """() => [...document.querySelectorAll("svg.stage-map text")]
  .filter((text) => text.getClientRects().length)
  .map((text) => {
    const box = text.closest("g.stage-map-topic")?.querySelector("rect");
    return {
      text: text.textContent.trim(),
      fill: getComputedStyle(text).fill,
      back: box ? getComputedStyle(box).fill : "rgba(0, 0, 0, 0)",
    };
  })"""


def map_contrast_failures(page) -> list[str]:
    """The stage map's words under 4.5:1, which axe-core leaves unchecked (SVG text)."""
    page_back = page.evaluate("getComputedStyle(document.body).backgroundColor")
    texts = page.evaluate(MAP_TEXTS)
    assert texts, "no stage map text is shown"
    ratios = [(t["text"], contrast(t["fill"], t["back"], page_back)) for t in texts]
    return [f"{text!r} at {ratio:.2f}:1" for text, ratio in ratios if ratio < 4.5]


def test_the_scheme_is_chosen_as_the_page_is_read_and_the_toggle_keeps_the_choice(page, site_url):
    """overrides/partials/palette.js, inlined into every page, in place of Material's palette
    component: a reader who prefers dark gets dark before the page has finished parsing (at
    DOMContentLoaded, before any deferred script), with the toggle to light showing; a click
    switches, a reload keeps the choice, Enter on the focused option switches back; and
    Material's component, which restyled the whole page at load, is not mounted."""
    source = (ROOT / "overrides" / "partials" / "palette.js").read_text("utf-8")
    served = urlopen(site_url + "stage-3/kv-cache/").read().decode()
    # Inlined as written: Jinja's include drops only the file's last newline.
    assert f"<script>{source.removesuffix(chr(10))}</script>" in served
    page.emulate_media(color_scheme="dark")
    page.goto(site_url + "sitemap.xml")
    page.evaluate("localStorage.clear()")
    page.goto(site_url + "stage-3/kv-cache/", wait_until="commit")
    page.wait_for_function("document.readyState !== 'loading'", timeout=15_000)
    shown = "document.body.dataset.mdColorScheme"
    visible_toggle = "[...document.querySelectorAll('.md-header__option label')]" + (
        ".filter((l) => !l.hidden).map((l) => l.title)"
    )
    assert page.evaluate(shown) == "slate"
    assert page.evaluate(visible_toggle) == ["Light mode"]
    assert page.evaluate("document.querySelector('meta[name=color-scheme]').content") == "dark"
    assert page.locator('[data-md-component="palette"]').count() == 0

    page.locator(".md-header__option label:not([hidden])").click()
    assert page.evaluate(shown) == "default"
    assert page.evaluate(visible_toggle) == ["Dark mode"]
    page.reload()
    assert page.evaluate(shown) == "default"  # the choice outlives the preference
    page.focus("#__palette_0")
    page.keyboard.press("Enter")
    assert page.evaluate(shown) == "slate"
    assert page.evaluate(visible_toggle) == ["Light mode"]
    page.emulate_media(color_scheme="light")
    page.reload()
    assert page.evaluate(shown) == "slate"


@pytest.mark.audit  # about 6 minutes: nox -s site-audit runs it
def test_every_page_meets_wcag_a_and_aa_in_light_and_dark(page, site_url, built_site):
    """axe-core on every built page, as a reader who prefers light and one who prefers dark
    sees it; and the home page again with progress, when the map shows Done, Ready, Locked.
    Every notebook page too: they are made alike from their pages, but nbconvert writes what
    a page does not (on one notebook page only, a Markdown code block that scrolls)."""
    source = axe_source()
    urls = [
        site_url + p.relative_to(built_site.site).as_posix().removesuffix("index.html")
        for p in sorted(built_site.site.glob("**/*.html"))
    ]
    stage_1 = [t.slug for t in CURRICULUM.topics if t.stage == 1]
    found = []
    for preference, scheme in SCHEMES.items():
        # A first visit: the scheme a reader chose (and progress.js the progress) is kept in
        # localStorage, and would show whatever the preference. The storage is cleared from
        # a page that runs no script (the sitemap), as it was when Material's component could
        # write its scheme back after the clear on a busy machine (CI saw it, on 404.html).
        page.emulate_media(color_scheme=preference)
        page.goto(site_url + "sitemap.xml")
        page.evaluate("localStorage.clear()")
        for url in urls:
            page.goto(url)
            page.wait_for_load_state("networkidle")  # progress.js has marked the nav and map
            # overrides/partials/palette.js applies the preferred scheme as the page is read.
            page.wait_for_function(
                f"document.body.dataset.mdColorScheme === {scheme!r}", timeout=15_000
            )
            found += [f"{url} ({preference}): {v}" for v in axe_violations(page, source)]
        # The map's colours change with the reader's progress: all three states at once.
        page.evaluate(
            "done => localStorage.setItem('llmserve-progress', JSON.stringify("
            "{format: 'llmserve-progress', version: 1, done}))",
            stage_1,
        )
        page.goto(site_url)
        page.wait_for_load_state("networkidle")
        states = page.locator(f"{MAP} text.progress-mark").all_text_contents()
        assert {s.split()[-1] for s in states} == {"Done", "Ready", "Locked"}, states
        where = f"{site_url} ({preference}, stage 1 done)"
        found += [f"{where}: {v}" for v in axe_violations(page, source)]
        found += [f"{where}: map text {f}" for f in map_contrast_failures(page)]
    assert found == [], f"{len(found)} accessibility failures:\n" + "\n".join(found)


def test_home_map_reads_on_a_phone(browser, site_url):
    """At 390 pixels wide the map shows its stages stacked: nothing scrolls sideways, every
    topic is on screen at a readable size, and Tab reaches every link in view."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(site_url)
    page.wait_for_load_state("networkidle")
    width = page.evaluate("window.innerWidth")
    assert width == 390
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not page.locator(MAP).is_visible()
    stacked = page.locator(STACKED_MAP)
    assert stacked.is_visible()

    written = curriculum.written_pages(CURRICULUM, ROOT / "docs")
    for topic in CURRICULUM.topics:
        node = stacked.locator(f'g.stage-map-topic[data-slug="{topic.slug}"]')
        node.scroll_into_view_if_needed()
        box = node.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (topic.slug, box)
        # Drawn 128 units wide at 11.5 units a letter: this wide, its words are >= 11.5 px.
        assert box["width"] >= 128, (topic.slug, box)
        # Its lines read back as its title, spaces and all (a screen reader reads this).
        assert node.locator("text.stage-map-label").text_content() == topic.title
        if topic.slug in written:  # progress.js marks the stacked map as well
            state = map_state(page, topic.slug, STACKED_MAP)
            assert state in ("Done", "Ready", "Locked"), state

    # The keyboard reaches each link of the map, and each is in view when it has the focus.
    page.evaluate("window.scrollTo(0, 0)")
    reached = {}
    for _ in range(300):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """() => { const a = document.activeElement;
              if (!a.closest('svg.stage-map[data-layout="stacked"]')) return null;
              const r = a.getBoundingClientRect();
              return {href: a.getAttribute("href"), inView: r.top >= 0 && r.left >= 0
                && r.bottom <= innerHeight && r.right <= innerWidth}; }"""
        )
        if focused:
            reached[focused["href"]] = focused["inView"]
        if len(reached) == len(written):
            break
    expected = {p.removesuffix(".md") + "/" for p in written.values()}
    assert set(reached) == expected
    assert all(reached.values()), [href for href, seen in reached.items() if not seen]
    SCREENSHOTS.mkdir(exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SCREENSHOTS / "home-phone.png"), full_page=True)
    context.close()


def test_sidebar_title_clears_the_nav(browser, site_url):
    """The site name atop the nav (two lines long) never covers the first nav item: on a
    desktop and on a large tablet held landscape, where the sidebar shows, and in the
    drawer that holds the nav on a smaller tablet."""
    written = curriculum.written_pages(CURRICULUM, ROOT / "docs")
    last = [t for t in CURRICULUM.topics if t.slug in written][-1]
    # The last page's nav item is far down: Material scrolls the sidebar to show it.
    url = site_url + written[last.slug].removesuffix(".md") + "/"
    nav = ".md-sidebar--primary .md-nav--primary"
    for width, drawer in [(1920, False), (1400, False), (1220, False), (1024, True)]:
        context = browser.new_context(viewport={"width": width, "height": 800})
        page = context.new_page()
        page.goto(url)
        page.wait_for_load_state("networkidle")
        if drawer:
            page.locator('label.md-header__button[for="__drawer"]').click()
            page.wait_for_function(
                "document.querySelector('.md-sidebar--primary').getBoundingClientRect().left >= 0"
            )
        for scrolled in (0, 600):
            page.evaluate("y => window.scrollTo(0, y)", scrolled)
            title = page.locator(f"{nav} > .md-nav__title").bounding_box()
            first = page.locator(f"{nav} > .md-nav__list > .md-nav__item").first.bounding_box()
            assert title and first
            assert title["y"] + title["height"] <= first["y"] + 0.5, (width, scrolled, title, first)
        context.close()
