"""The How we test page shows the mutation scores `nox -s mutation -- --record` recorded:
the built page's table is recordings/mutation.json (hooks/mutation_scores.py), and the file
is a run of every module tests/mutation/score.py mutates, each against the tests it names."""

from __future__ import annotations

import html
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
sys.path.insert(0, str(ROOT / "tests" / "mutation"))

import mutation_scores
import score


def test_the_recorded_run_is_of_every_module_against_its_own_tests():
    results = mutation_scores.load()
    assert {m["module"]: m["tests"] for m in results["modules"]} == score.MODULES
    assert results["threshold"] == score.THRESHOLD
    for m in results["modules"]:
        counted = m["killed"] + m["survived"] + m["timed_out"] + m["no_tests"]
        assert counted == m["made"] > 0, m["module"]
        assert len(m["survivors"]) == m["survived"] + m["no_tests"], m["module"]
        assert m["killed"] / m["made"] >= results["threshold"], m["module"]


def text(fragment: str) -> str:
    """What a reader reads of an HTML fragment: its tags gone, its entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def cells(row: str) -> list[str]:
    return [text(cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]


@pytest.mark.slow
def test_the_pages_table_is_the_recorded_file(built_site):
    page = (built_site.site / "how-we-test" / "index.html").read_text(encoding="utf-8")
    (table,) = re.findall(r"<table>.*?</table>", page, re.S)
    rows = [cells(row) for row in re.findall(r"<tr>.*?</tr>", table, re.S)]
    results = mutation_scores.load()
    expected = [[cell.replace("`", "") for cell in row] for row in mutation_scores.rows(results)]
    assert rows == [mutation_scores.HEADER, *expected]
    assert results["tool"] in page and f"{results['threshold']:.0%}" in page
    listed = re.search(r"<details class=\"note\">(.*?)</details>", page, re.S)
    assert listed, "the survivors are listed under the table"
    items = [text(item) for item in re.findall(r"<li>(.*?)</li>", listed[1], re.S)]
    assert items == [line.replace("`", "") for line in mutation_scores.survivor_lines(results)]
    home = (built_site.site / "index.html").read_text(encoding="utf-8")
    assert 'href="how-we-test/"' in home
