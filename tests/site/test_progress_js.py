"""The reader's progress (docs/javascripts/progress.js) follows the stage graph's rules.

Its pure core runs under Node on the curriculum as the build ships it (`curriculum_json`, from
the same curriculum.yml the hook reads). The rules, written here independently: a topic is
Done when marked, Ready when all its needs are Done, Locked otherwise; Next up is the Ready
topics in stage order. The whole flow in a browser is tests/site/test_browser.py's.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from conftest import NEEDS_NODE, run_node

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import curriculum as cur  # noqa: E402

PROGRESS = ROOT / "docs" / "javascripts" / "progress.js"

pytestmark = NEEDS_NODE

# Reads {topics, calls: [[function, args...]]} on stdin; prints each call's result or error.
RUNNER = r"""
const progress = require(process.argv[1]);
const { topics, calls } = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = calls.map(([name, ...args]) => {
  try {
    if (name === "states") return progress.topicStates(topics, new Set(args[0]));
    if (name === "nextUp") return progress.nextUp(topics, new Set(args[0])).map((t) => t.slug);
    if (name === "missing") {
      const topic = topics.find((t) => t.slug === args[0]);
      return progress.missingNeeds(topic, new Set(args[1]));
    }
    if (name === "export") return progress.exportProgress(topics, new Set(args[0]));
    if (name === "import") return [...progress.importProgress(topics, args[0])];
    throw new Error(`no such call: ${name}`);
  } catch (error) {
    return { error: error.message };
  }
});
console.log(JSON.stringify(out));
"""

CURRICULUM = cur.load()
TOPICS = json.loads(
    cur.curriculum_json(
        CURRICULUM, {t.slug: f"stage-{t.stage}/{t.slug}/" for t in CURRICULUM.topics}
    )
)["topics"]
STAGE_1 = {t.slug for t in CURRICULUM.topics if t.stage == 1}
STAGE_2 = {t.slug for t in CURRICULUM.topics if t.stage == 2}


def run(*calls: list) -> list:
    """Each call's result from progress.js under Node, in order."""
    return run_node(RUNNER, PROGRESS, {"topics": TOPICS, "calls": list(calls)})


def expected_state(slug: str, done: set[str]) -> str:
    if slug in done:
        return "done"
    return "ready" if set(CURRICULUM.by_slug[slug].needs) <= done else "locked"


def test_a_new_reader_can_start_only_at_stage_1():
    (states,) = run(["states", []])
    assert {s for s, state in states.items() if state == "ready"} == STAGE_1
    assert {s for s, state in states.items() if state == "locked"} == set(states) - STAGE_1


def test_stage_1_done_makes_both_stage_2_topics_ready():
    states, up = run(["states", sorted(STAGE_1)], ["nextUp", sorted(STAGE_1)])
    assert len(STAGE_2) == 2
    assert {s for s, state in states.items() if state == "ready"} == STAGE_2
    assert set(up) == STAGE_2


def test_every_state_and_next_up_match_the_rules_on_random_progress():
    rng = random.Random(0)
    slugs = [t.slug for t in CURRICULUM.topics]
    cases = [set(rng.sample(slugs, rng.randint(0, len(slugs)))) for _ in range(200)]
    results = run(*[[kind, sorted(done)] for done in cases for kind in ("states", "nextUp")])
    for done, states, up in zip(cases, results[::2], results[1::2], strict=True):
        assert states == {s: expected_state(s, done) for s in slugs}
        ready = [t for t in CURRICULUM.topics if expected_state(t.slug, done) == "ready"]
        assert up == [t.slug for t in sorted(ready, key=lambda t: t.stage)]


def test_following_next_up_reaches_every_topic():
    """Marking the first Next up topic done, again and again, finishes the curriculum."""
    done: list[str] = []
    for _ in CURRICULUM.topics:
        (up,) = run(["nextUp", done])
        assert up, f"nothing is Ready with {len(done)} topics done"
        done.append(up[0])
    assert sorted(done) == sorted(t.slug for t in CURRICULUM.topics)
    assert run(["nextUp", done]) == [[]]


def test_a_locked_page_names_the_needs_not_done_yet():
    topic = next(t for t in CURRICULUM.topics if len(t.needs) >= 2)
    first = topic.needs[0]
    missing_none, missing_one = run(["missing", topic.slug, []], ["missing", topic.slug, [first]])
    assert missing_none == list(topic.needs)
    assert missing_one == list(topic.needs[1:])


def test_export_then_import_restores_progress():
    done = sorted(STAGE_1 | STAGE_2)
    (text,) = run(["export", done])
    assert json.loads(text) == {
        "format": "llmserve-progress",
        "version": 1,
        "done": [t.slug for t in CURRICULUM.topics if t.slug in done],
    }
    assert sorted(run(["import", text])[0]) == done


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "it is not JSON"),
        ('{"done": []}', 'it has no "format": "llmserve-progress"'),
        ('{"format": "llmserve-progress", "version": 2, "done": []}', "has version 2"),
        ('{"format": "llmserve-progress", "version": 1, "done": "kv-cache"}', "must be a list"),
        (
            '{"format": "llmserve-progress", "version": 1, "done": ["kv-cache", "warp-drive"]}',
            "topics this site does not have: warp-drive",
        ),
    ],
)
def test_a_bad_progress_file_is_refused_with_what_is_wrong(text, says):
    (result,) = run(["import", text])
    assert says in result["error"]
