"""MkDocs hook: the stage graph drives the nav, the Needs/Unlocks boxes and the stage map.

`curriculum.yml` at the repository root is the one list of topics. This hook reads it and

- orders the nav by stage (Stage 1 ... Stage 9), written topics only;
- gives every topic page its title, a "Needs" box at the top (a link to each
  prerequisite) and an "Unlocks" list at the bottom (the topics that need it);
- replaces the `<!-- stage-map -->` marker on the home page with an inline SVG
  drawn at build time: stages as columns, prerequisite arrows, every written
  topic a link, unwritten ones greyed with no link;
- logs which topics are still unwritten.

A topic's page is `docs/stage-<stage>/<slug>.md`.
"""

from __future__ import annotations

import html
import logging
import posixpath
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml

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
BOX_HEIGHT, ROW_GAP = 56, 14
HEADER = 36
LINE_CHARS = 18


def stage_map_svg(curriculum: Curriculum, hrefs: dict[str, str]) -> str:
    """The stage graph as an inline SVG: one column per stage, an arrow per prerequisite.

    `hrefs` maps the slug of each written topic to its URL; the others are drawn greyed,
    with no link, so the map never points at a page that does not exist.
    """
    position: dict[str, tuple[float, float]] = {}
    for col, stage in enumerate(curriculum.stages):
        for row, t in enumerate(curriculum.in_stage(stage)):
            position[t.slug] = (col * (COL_WIDTH + COL_GAP), HEADER + row * (BOX_HEIGHT + ROW_GAP))
    width = len(curriculum.stages) * (COL_WIDTH + COL_GAP) - COL_GAP
    height = max(y for _, y in position.values()) + BOX_HEIGHT + 2

    parts = [
        f'<svg class="stage-map" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="-2 0 {width + 4} {height}" width="{width + 4}" height="{height}" '
        f'role="img" aria-labelledby="stage-map-title">',
        '<title id="stage-map-title">The stage map: every topic, by stage, '
        "with arrows from each prerequisite</title>",
        '<defs><marker id="stage-map-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" class="stage-map-arrowhead"/></marker></defs>',
    ]
    for col, stage in enumerate(curriculum.stages):
        x = col * (COL_WIDTH + COL_GAP) + COL_WIDTH / 2
        parts.append(f'<text class="stage-map-stage" x="{x}" y="20">Stage {stage}</text>')
    for t in curriculum.topics:
        x1, y1 = position[t.slug]
        for need in t.needs:
            x0, y0 = position[need]
            sx, sy = x0 + COL_WIDTH, y0 + BOX_HEIGHT / 2
            ex, ey = x1 - 2, y1 + BOX_HEIGHT / 2
            bend = (ex - sx) / 2
            parts.append(
                f'<path class="stage-map-edge" data-from="{need}" data-to="{t.slug}" '
                f'd="M {sx} {sy} C {sx + bend} {sy}, {ex - bend} {ey}, {ex} {ey}" '
                'marker-end="url(#stage-map-arrow)"/>'
            )
    for t in curriculum.topics:
        x, y = position[t.slug]
        lines = textwrap.wrap(t.title, LINE_CHARS)
        first = y + BOX_HEIGHT / 2 - (len(lines) - 1) * 7 + 4
        text = "".join(
            f'<tspan x="{x + COL_WIDTH / 2}" y="{first + i * 14}">{html.escape(line)}</tspan>'
            for i, line in enumerate(lines)
        )
        state = "written" if t.slug in hrefs else "unwritten"
        tooltip = t.summary if state == "written" else f"{t.summary} (not written yet)"
        node = (
            f'<g class="stage-map-topic {state}" data-slug="{t.slug}">'
            f"<title>{html.escape(tooltip)}</title>"
            f'<rect x="{x}" y="{y}" width="{COL_WIDTH}" height="{BOX_HEIGHT}" rx="8"/>'
            f'<text class="stage-map-label">{text}</text></g>'
        )
        if state == "written":
            node = f'<a href="{html.escape(hrefs[t.slug])}">{node}</a>'
        parts.append(node)
    parts.append("</svg>")
    return "".join(parts)


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


def on_page_markdown(markdown, page, config, files):
    curriculum: Curriculum = _state["curriculum"]
    pages: dict[str, str] = _state["pages"]
    slug = _state["by_page"].get(page.file.src_uri)
    if slug is not None:
        topic = curriculum.by_slug[slug]
        page.meta.setdefault("title", topic.title)
        return (
            f"# {topic.title}\n\n{needs_box(curriculum, topic, pages)}\n{markdown}\n\n"
            f"{unlocks_box(curriculum, topic, pages)}"
        )
    if STAGE_MAP_MARKER in markdown:
        # The map sits on the home page, at the site root, so a page's URL is its link.
        hrefs = {s: files.get_file_from_path(p).url for s, p in pages.items()}
        svg = stage_map_svg(curriculum, hrefs)
        return markdown.replace(STAGE_MAP_MARKER, f'<div class="stage-map-scroll">{svg}</div>')
    return markdown
