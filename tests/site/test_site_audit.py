"""The Lighthouse audit's bars (tests/lighthouse/site_audit.py, run by `nox -s site-audit`):
which pages it audits, which it audits again, and what fails it, on made-up results."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "lighthouse"))

import site_audit
from site_audit import ACCESSIBILITY, MARGIN, MEDIAN_OF, MOBILE_PERFORMANCE, failures

BAR = MOBILE_PERFORMANCE + MARGIN


def result(url: str, preset: str, performance: int, accessibility: int = ACCESSIBILITY) -> dict:
    failed = ["color-contrast"] if accessibility < ACCESSIBILITY else []
    return {"url": url, "preset": preset, "performance": performance,
            "accessibility": accessibility, "a11yFailures": failed}  # fmt: skip


def test_every_page_is_audited_the_notebooks_too_but_the_404_page(tmp_path):
    for page in ("index.html", "404.html", "stage-1/a/index.html", "stage-1/a/notebooks/a.html"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("<html></html>")
    assert site_audit.pages(tmp_path, "") == ["", "stage-1/a/", "stage-1/a/notebooks/a.html"]
    assert site_audit.pages(tmp_path, "/notebooks/") == ["stage-1/a/notebooks/a.html"]


def test_a_phone_score_under_the_bar_is_audited_again_up_to_the_median_of_five():
    runs = [[result("a", "mobile", BAR - 1), result("b", "mobile", BAR),
             result("a", "desktop", 50)]]  # fmt: skip
    assert site_audit.short_of_the_bar(runs) == ["a"]  # desktop scores are not judged
    runs += [[result("a", "mobile", BAR - 1)] for _ in range(MEDIAN_OF - 1)]
    assert site_audit.short_of_the_bar(runs) == []  # five runs: its median is the answer


def test_the_median_of_a_pages_phone_runs_is_judged_not_its_worst():
    runs = [[result("a", "mobile", BAR - 10)], [result("a", "mobile", BAR)],
            [result("a", "mobile", BAR + 2)]]  # fmt: skip
    assert failures(runs) == []
    runs.append([result("a", "mobile", BAR - 1)])  # [-10, 0, +2, -1]: the median is -0.5
    (failure,) = failures(runs)
    assert failure == f"a (mobile): performance {BAR - 0.5:g}, the median of " + (
        f"{[BAR - 10, BAR, BAR + 2, BAR - 1]}, < {MOBILE_PERFORMANCE} + {MARGIN}"
    )


def test_accessibility_under_100_fails_in_any_run_and_preset_naming_the_audits():
    worse = result("a", "desktop", 100, accessibility=96)
    runs = [[result("a", "mobile", 100), result("a", "desktop", 100)],
            [result("a", "mobile", 100), worse]]  # fmt: skip
    assert failures(runs) == ["a (desktop): accessibility 96 < 100: color-contrast"]
