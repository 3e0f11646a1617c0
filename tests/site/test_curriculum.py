"""The stage graph is sound, and the built site shows exactly what it says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import curriculum as cur  # noqa: E402

CURRICULUM = cur.load()
PAGES = cur.written_pages(CURRICULUM, ROOT / "docs")


def test_the_design_has_24_topics_in_9_stages():
    assert len(CURRICULUM.topics) == 24
    assert CURRICULUM.stages == list(range(1, 10))


def test_graph_is_acyclic_and_prerequisites_come_earlier():
    assert cur.check(CURRICULUM) == []
    for topic in CURRICULUM.topics:
        for need in topic.needs:
            assert CURRICULUM.by_slug[need].stage < topic.stage


def test_check_reports_a_cycle_and_a_late_prerequisite():
    a = cur.Topic("a", "A", 1, "concept", "s", ("b",))
    b = cur.Topic("b", "B", 1, "concept", "s", ("a",))
    problems = cur.check(cur.Curriculum([a, b]))
    assert any("cycle" in p for p in problems)
    assert any("earlier stage" in p for p in problems)
    unknown = cur.Topic("c", "C", 2, "concept", "s", ("nope",))
    assert any("not a topic" in p for p in cur.check(cur.Curriculum([unknown])))


def test_every_topic_page_belongs_to_the_graph():
    """No page under docs/stage-*/ is outside the graph or in the wrong stage folder."""
    expected = set(PAGES.values())
    for page in (ROOT / "docs").glob("stage-*/*.md"):
        rel = page.relative_to(ROOT / "docs").as_posix()
        assert rel in expected, f"{rel} is not the page of any topic in curriculum.yml"


def boxes(html: str) -> tuple[str, str]:
    """The Needs and Unlocks admonitions of a built page, as HTML."""
    needs = re.search(r'<div class="admonition abstract">.*?</div>', html, re.S)
    unlocks = re.search(
        r'<div class="admonition tip">\s*<p class="admonition-title">Unlocks.*?</div>', html, re.S
    )
    assert needs and unlocks, "page lacks its Needs or Unlocks box"
    return needs.group(0), unlocks.group(0)


def hrefs(fragment: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', fragment)


@pytest.mark.slow
def test_needs_and_unlocks_boxes_match_the_data(built_site):
    assert PAGES, "no topic page is written yet"
    for slug, page in PAGES.items():
        topic = CURRICULUM.by_slug[slug]
        html_file = built_site.site / page.removesuffix(".md") / "index.html"
        html = html_file.read_text(encoding="utf-8")
        assert "<h1" in html and topic.title in html
        needs, unlocks = boxes(html)
        want_needs = [s for s in topic.needs if s in PAGES]
        got = [(html_file.parent / h).resolve() for h in hrefs(needs)]
        assert got == [
            (built_site.site / PAGES[s].removesuffix(".md")).resolve() for s in want_needs
        ]
        for s in topic.needs:
            assert CURRICULUM.by_slug[s].title in needs
        for t in CURRICULUM.unlocks(slug):
            assert t.title in unlocks
        for h in hrefs(needs) + hrefs(unlocks):
            assert (html_file.parent / h / "index.html").resolve().is_file(), (
                f"dead link {h} on {page}"
            )


@pytest.mark.slow
def test_stage_map_links_written_topics_and_greys_the_rest(built_site):
    html = (built_site.site / "index.html").read_text(encoding="utf-8")
    svg = re.search(r"<svg class=\"stage-map\".*?</svg>", html, re.S).group(0)
    topics = re.findall(r'<g class="stage-map-topic (written|unwritten)" data-slug="([^"]+)"', svg)
    assert sorted(s for _, s in topics) == sorted(t.slug for t in CURRICULUM.topics)
    for state, slug in topics:
        assert (state == "written") == (slug in PAGES)
    links = re.findall(
        r'<a href="([^"]+)"><g class="stage-map-topic written" data-slug="([^"]+)"', svg
    )
    assert {s for _, s in links} == set(PAGES)
    for href, _ in links:
        assert (built_site.site / href / "index.html").is_file()
    edges = re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', svg)
    assert sorted(edges) == sorted((n, t.slug) for t in CURRICULUM.topics for n in t.needs)
    assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.slow
def test_build_names_the_unwritten_topics(built_site):
    unwritten = [t.slug for t in CURRICULUM.topics if t.slug not in PAGES]
    line = next(line for line in built_site.log.splitlines() if "curriculum:" in line)
    assert f"{len(PAGES)} of 24 topics written" in line
    for slug in unwritten:
        assert slug in line


@pytest.mark.slow
def test_nav_is_ordered_by_stage(built_site):
    html = (built_site.site / "index.html").read_text(encoding="utf-8")
    nav = html.split("md-nav--primary", 1)[1].split("md-sidebar--secondary", 1)[0]
    stages = [int(s) for s in re.findall(r">\s*Stage (\d)\s*<", nav)]
    written_stages = sorted({CURRICULUM.by_slug[s].stage for s in PAGES})
    assert sorted(set(stages)) == written_stages
    assert stages == sorted(stages)
