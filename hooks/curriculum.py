"""MkDocs hook: the stage graph drives the nav, the Needs/Unlocks boxes and the stage map.

`curriculum.yml` at the repository root is the one list of topics. This hook reads it and

- orders the nav by stage (Stage 1 ... Stage 9), written topics only;
- gives every topic page its title, a "Needs" box at the top (a link to each
  prerequisite) and an "Unlocks" list at the bottom (the topics that need it);
- replaces the `<!-- stage-map -->` marker on the home page with an inline SVG
  drawn at build time: stages as columns, prerequisite arrows, every written
  topic a link, unwritten ones greyed with no link (and the same topics with
  stages stacked, for phones); under it, the place of the
  reader's progress (legend, Next up), which docs/javascripts/progress.js fills;
- puts an empty progress control (Mark as done) under every topic's Needs box;
- writes `javascripts/curriculum.json`, the topics with their needs and URLs, which
  progress.js reads, so the browser's rules run on this same graph;
- logs which topics are still unwritten.

A topic's page is `docs/stage-<stage>/<slug>.md`.
"""

from __future__ import annotations

import html
import json
import logging
import posixpath
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.curriculum")

ROOT = Path(__file__).resolve().parent.parent
DATA_FILE = ROOT / "curriculum.yml"
PAGE_SUFFIXES = (".md",)
STAGE_MAP_MARKER = "<!-- stage-map -->"


@dataclass(frozen=True)
class Topic:
    slug: str
    title: str
    stage: int
    kind: str
    summary: str
    needs: tuple[str, ...]


@dataclass
class Curriculum:
    topics: list[Topic]
    by_slug: dict[str, Topic] = field(init=False)

    def __post_init__(self) -> None:
        self.by_slug = {t.slug: t for t in self.topics}

    @property
    def stages(self) -> list[int]:
        return sorted({t.stage for t in self.topics})

    def in_stage(self, stage: int) -> list[Topic]:
        return [t for t in self.topics if t.stage == stage]

    def unlocks(self, slug: str) -> list[Topic]:
        """The topics that list `slug` among their needs."""
        return [t for t in self.topics if slug in t.needs]

    def page_candidates(self, topic: Topic) -> list[str]:
        """Paths, relative to docs/, where this topic's page may live."""
        return [f"stage-{topic.stage}/{topic.slug}{suffix}" for suffix in PAGE_SUFFIXES]


def load(path: Path = DATA_FILE) -> Curriculum:
    """Read and check the stage graph; a broken graph stops the build with a clear error."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    topics = [
        Topic(
            slug=t["slug"],
            title=t["title"],
            stage=int(t["stage"]),
            kind=t["kind"],
            summary=t["summary"],
            needs=tuple(t.get("needs") or ()),
        )
        for t in raw["topics"]
    ]
    curriculum = Curriculum(topics)
    problems = check(curriculum)
    if problems:
        raise ValueError(f"{path.name} is inconsistent:\n  " + "\n  ".join(problems))
    return curriculum


def check(curriculum: Curriculum) -> list[str]:
    """Every way the graph can be wrong, as readable sentences (empty when it is sound)."""
    problems = []
    seen: set[str] = set()
    for t in curriculum.topics:
        if t.slug in seen:
            problems.append(f"slug {t.slug!r} appears twice")
        seen.add(t.slug)
        if t.kind not in ("concept", "lab"):
            problems.append(f"{t.slug}: kind must be 'concept' or 'lab', not {t.kind!r}")
        for need in t.needs:
            other = curriculum.by_slug.get(need)
            if other is None:
                problems.append(f"{t.slug} needs {need!r}, which is not a topic")
            elif other.stage >= t.stage:
                problems.append(
                    f"{t.slug} (stage {t.stage}) needs {need} from stage {other.stage}: "
                    "a prerequisite must sit in an earlier stage"
                )
    cycle = find_cycle(curriculum)
    if cycle:
        problems.append("prerequisite cycle: " + " -> ".join(cycle))
    return problems


def find_cycle(curriculum: Curriculum) -> list[str]:
    """A prerequisite cycle as a list of slugs, or [] when the graph is acyclic."""
    state: dict[str, str] = {}  # slug -> "visiting" | "done"

    def visit(slug: str, path: list[str]) -> list[str]:
        if state.get(slug) == "visiting":
            return [*path[path.index(slug) :], slug]
        if state.get(slug) == "done" or slug not in curriculum.by_slug:
            return []
        state[slug] = "visiting"
        for need in curriculum.by_slug[slug].needs:
            cycle = visit(need, [*path, slug])
            if cycle:
                return cycle
        state[slug] = "done"
        return []

    for t in curriculum.topics:
        cycle = visit(t.slug, [])
        if cycle:
            return cycle
    return []


def written_pages(curriculum: Curriculum, docs_dir: Path) -> dict[str, str]:
    """slug -> page path (relative to docs/) for every topic whose page exists."""
    pages = {}
    for t in curriculum.topics:
        found = [p for p in curriculum.page_candidates(t) if (docs_dir / p).is_file()]
        if len(found) > 1:
            raise ValueError(f"{t.slug} has more than one page: {', '.join(found)}")
        if found:
            pages[t.slug] = found[0]
    return pages


# --- The stage map ------------------------------------------------------------------

COL_WIDTH, COL_GAP = 128, 24
BOX_HEIGHT, ROW_GAP = 68, 14
MARK_ROOM = 12  # the top of each box holds the reader's progress mark (progress.js)
HEADER = 36
LINE_CHARS = 18
STACKED_COLUMNS = 2  # topics side by side in the stacked map: fits a 320-pixel phone


def stage_map_svg(curriculum: Curriculum, hrefs: dict[str, str]) -> str:
    """The stage graph as two inline SVGs, of which the page shows the one that fits (site.css).

    - `columns`, where there is room: one column per stage, an arrow per prerequisite;
    - `stacked`, on a phone: the stages one under the other, a few topics side by side, no
      arrows (a topic's page lists what it needs), so nothing scrolls sideways.

    `hrefs` maps the slug of each written topic to its URL; the others are drawn greyed,
    with no link, so the map never points at a page that does not exist. Each map is a group
    of lists, one per stage, whose items are its topics: a screen reader walks the stages
    and the keyboard reaches every link. progress.js marks the topics of both maps.
    """
    return columns_map(curriculum, hrefs) + stacked_map(curriculum, hrefs)


def columns_map(curriculum: Curriculum, hrefs: dict[str, str]) -> str:
    """The map for wide screens: stages as columns, arrows from each prerequisite."""
    position: dict[str, tuple[float, float]] = {}
    headers: dict[int, tuple[float, float]] = {}
    for col, stage in enumerate(curriculum.stages):
        headers[stage] = (col * (COL_WIDTH + COL_GAP) + COL_WIDTH / 2, 20)
        for row, t in enumerate(curriculum.in_stage(stage)):
            position[t.slug] = (col * (COL_WIDTH + COL_GAP), HEADER + row * (BOX_HEIGHT + ROW_GAP))
    width = len(curriculum.stages) * (COL_WIDTH + COL_GAP) - COL_GAP
    edges = [
        '<defs><marker id="stage-map-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" class="stage-map-arrowhead"/></marker></defs>'
    ]
    for t in curriculum.topics:
        x1, y1 = position[t.slug]
        for need in t.needs:
            x0, y0 = position[need]
            sx, sy = x0 + COL_WIDTH, y0 + BOX_HEIGHT / 2
            ex, ey = x1 - 2, y1 + BOX_HEIGHT / 2
            bend = (ex - sx) / 2
            edges.append(
                f'<path class="stage-map-edge" data-from="{need}" data-to="{t.slug}" '
                f'd="M {sx} {sy} C {sx + bend} {sy}, {ex - bend} {ey}, {ex} {ey}" '
                'marker-end="url(#stage-map-arrow)"/>'
            )
    return _map_svg(
        curriculum,
        hrefs,
        layout="columns",
        title="every topic, by stage, with arrows from each prerequisite",
        width=width,
        headers=headers,
        position=position,
        behind="".join(edges),
    )


def stacked_map(curriculum: Curriculum, hrefs: dict[str, str]) -> str:
    """The map for narrow screens: each stage a heading over its topics, rows centred."""
    width = STACKED_COLUMNS * (COL_WIDTH + COL_GAP) - COL_GAP
    position: dict[str, tuple[float, float]] = {}
    headers: dict[int, tuple[float, float]] = {}
    top = 0
    for stage in curriculum.stages:
        headers[stage] = (width / 2, top + 20)
        topics = curriculum.in_stage(stage)
        rows = [topics[i : i + STACKED_COLUMNS] for i in range(0, len(topics), STACKED_COLUMNS)]
        for r, row in enumerate(rows):
            left = (width - (len(row) * (COL_WIDTH + COL_GAP) - COL_GAP)) / 2
            for c, t in enumerate(row):
                x = left + c * (COL_WIDTH + COL_GAP)
                position[t.slug] = (x, top + HEADER + r * (BOX_HEIGHT + ROW_GAP))
        top += HEADER + len(rows) * (BOX_HEIGHT + ROW_GAP)
    return _map_svg(
        curriculum,
        hrefs,
        layout="stacked",
        title="every topic, stage by stage (each topic's page names what it needs)",
        width=width,
        headers=headers,
        position=position,
        behind="",
    )


def _map_svg(
    curriculum: Curriculum,
    hrefs: dict[str, str],
    *,
    layout: str,
    title: str,
    width: float,
    headers: dict[int, tuple[float, float]],
    position: dict[str, tuple[float, float]],
    behind: str,
) -> str:
    """One layout of the map: `behind` (its arrows) under a list of topics per stage.

    role="group", not "img": an image's content is hidden from assistive technology, and
    this one holds links. The visible "Stage N" heading is hidden from it instead, since the
    stage's list carries the same words as its name.
    """
    height = max(y for _, y in position.values()) + BOX_HEIGHT + 2
    parts = [
        f'<svg class="stage-map" data-layout="{layout}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="-2 0 {width + 4} {height}" width="{width + 4}" height="{height}" '
        f'role="group"><title>The stage map: {html.escape(title)}</title>{behind}'
    ]
    for stage in curriculum.stages:
        x, y = headers[stage]
        topics = curriculum.in_stage(stage)
        items = "".join(_topic_item(t, *position[t.slug], hrefs) for t in topics)
        parts.append(
            f'<text class="stage-map-stage" x="{x}" y="{y}" aria-hidden="true">Stage {stage}</text>'
            f'<g role="list" aria-label="Stage {stage}">{items}</g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _topic_item(topic: Topic, x: float, y: float, hrefs: dict[str, str]) -> str:
    """A topic's box, a list item: a link to its page if written, greyed otherwise."""
    # Lines break between words only, so that joined by spaces they are the title again.
    lines = textwrap.wrap(topic.title, LINE_CHARS, break_long_words=False, break_on_hyphens=False)
    first = y + (BOX_HEIGHT + MARK_ROOM) / 2 - (len(lines) - 1) * 7 + 4
    # Each line is placed by its own x and y; the space between them makes the title read
    # "a b" rather than "ab" (to a screen reader, and in the link's name).
    text = " ".join(
        f'<tspan x="{x + COL_WIDTH / 2}" y="{first + i * 14}">{html.escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    state = "written" if topic.slug in hrefs else "unwritten"
    tooltip = topic.summary if state == "written" else f"{topic.summary} (not written yet)"
    node = (
        f'<g class="stage-map-topic {state}" data-slug="{topic.slug}">'
        f"<title>{html.escape(tooltip)}</title>"
        f'<rect x="{x}" y="{y}" width="{COL_WIDTH}" height="{BOX_HEIGHT}" rx="8"/>'
        f'<text class="stage-map-label">{text}</text></g>'
    )
    if state == "written":
        node = f'<a href="{html.escape(hrefs[topic.slug])}">{node}</a>'
    return f'<g role="listitem">{node}</g>'


# --- Boxes on topic pages -----------------------------------------------------------


def _link_list(topics: list[Topic], pages: dict[str, str], from_page: str) -> str:
    items = []
    for t in topics:
        if t.slug in pages:
            rel = posixpath.relpath(pages[t.slug], posixpath.dirname(from_page))
            items.append(f"[{t.title}]({rel})")
        else:
            items.append(f"{t.title} *(not written yet)*")
    return " · ".join(items)


def needs_box(curriculum: Curriculum, topic: Topic, pages: dict[str, str]) -> str:
    kind = "Lab" if topic.kind == "lab" else "Concept"
    if topic.needs:
        needed = [curriculum.by_slug[s] for s in topic.needs]
        body = _link_list(needed, pages, pages[topic.slug])
    else:
        body = "Nothing: this is where the curriculum starts."
    return (
        f'!!! abstract "Needs"\n\n'
        f"    {body}\n\n"
        f"    <small>Stage {topic.stage} · {kind} · {topic.summary}</small>\n"
    )


def progress_control(topic: Topic) -> str:
    """The place of a topic page's "Mark as done" control; progress.js fills and shows it."""
    return f'<div class="progress-control" data-topic="{topic.slug}" hidden></div>\n'


# The reader's progress under the map: its legend, Next up, reset/export/import (progress.js).
PROGRESS_HOME = '<div id="progress-panel" hidden></div>'


def curriculum_json(curriculum: Curriculum, urls: dict[str, str]) -> str:
    """The written topics as progress.js reads them: slug, title, stage, summary, needs, URL."""
    topics = [
        {
            "slug": t.slug,
            "title": t.title,
            "stage": t.stage,
            "summary": t.summary,
            "needs": list(t.needs),
            "url": urls[t.slug],
        }
        for t in curriculum.topics
        if t.slug in urls
    ]
    return json.dumps({"topics": topics}, indent=1)


def unlocks_box(curriculum: Curriculum, topic: Topic, pages: dict[str, str]) -> str:
    unlocked = curriculum.unlocks(topic.slug)
    if not unlocked:
        body = "Nothing further: this is the last stage of the curriculum."
    else:
        body = _link_list(unlocked, pages, pages[topic.slug])
    return f'!!! tip "Unlocks"\n\n    {body}\n'


# --- MkDocs events ------------------------------------------------------------------

_state: dict = {}


def on_config(config):
    curriculum = load()
    docs_dir = Path(config["docs_dir"])
    pages = written_pages(curriculum, docs_dir)
    nav: list = [{"Home": "index.md"}]
    for stage in curriculum.stages:
        section = [{t.title: pages[t.slug]} for t in curriculum.in_stage(stage) if t.slug in pages]
        if section:
            nav.append({f"Stage {stage}": section})
    config["nav"] = nav
    _state.update(curriculum=curriculum, pages=pages, by_page={p: s for s, p in pages.items()})
    unwritten = [t.slug for t in curriculum.topics if t.slug not in pages]
    log.info(
        "curriculum: %d of %d topics written; unwritten: %s",
        len(pages),
        len(curriculum.topics),
        ", ".join(unwritten) or "none",
    )
    return config


def on_files(files, config):
    urls = {s: files.get_file_from_path(p).url for s, p in _state["pages"].items()}
    content = curriculum_json(_state["curriculum"], urls)
    files.append(File.generated(config, "javascripts/curriculum.json", content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    curriculum: Curriculum = _state["curriculum"]
    pages: dict[str, str] = _state["pages"]
    slug = _state["by_page"].get(page.file.src_uri)
    if slug is not None:
        topic = curriculum.by_slug[slug]
        page.meta.setdefault("title", topic.title)
        return (
            f"# {topic.title}\n\n{needs_box(curriculum, topic, pages)}\n"
            f"{progress_control(topic)}\n{markdown}\n\n"
            f"{unlocks_box(curriculum, topic, pages)}"
        )
    if STAGE_MAP_MARKER in markdown:
        # The map sits on the home page, at the site root, so a page's URL is its link.
        hrefs = {s: files.get_file_from_path(p).url for s, p in pages.items()}
        svg = stage_map_svg(curriculum, hrefs)
        return markdown.replace(
            STAGE_MAP_MARKER, f'<div class="stage-map-box">{svg}</div>\n\n{PROGRESS_HOME}'
        )
    return markdown
