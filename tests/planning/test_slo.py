"""The SLO: a request meets it when it meets every target given, each at most its bound.

Checked against the definition written out here on a grid of latencies around the
targets (below, at, above; a missing TPOT as NaN), with every combination of targets set
and unset, so a wrong comparison (``<`` for ``<=``), a target read in another field, or a
NaN compared as a number would show.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from llmserve_ref.planning.slo import SLO

TARGETS = {"ttft": 0.5, "tpot": 0.05, "e2e": 4.0}


def meets(targets: dict[str, float | None], latencies: dict[str, float]) -> bool:
    """The definition: every given target at least the latency; no TPOT (NaN) meets any."""
    return all(
        bound is None
        or (name == "tpot" and math.isnan(latencies[name]))
        or latencies[name] <= bound
        for name, bound in targets.items()
    )


def around(bound: float) -> list[float]:
    return [0.0, bound / 2, bound, math.nextafter(bound, math.inf), 2 * bound]


@pytest.mark.parametrize("given", list(itertools.product([False, True], repeat=3)), ids=str)
def test_met_by_is_the_definition_on_a_grid(given):
    pairs = zip(TARGETS.items(), given, strict=True)
    targets = {name: bound if on else None for (name, bound), on in pairs}
    slo = SLO(**targets)
    grid = itertools.product(around(0.5), [*around(0.05), math.nan], around(4.0))
    checked = 0
    for ttft, tpot, e2e in grid:
        latencies = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
        assert slo.met_by(**latencies) == meets(targets, latencies), (targets, latencies)
        checked += 1
    assert checked == 5 * 6 * 5


def test_a_bound_is_met_at_equality_and_missed_just_past_it():
    slo = SLO(ttft=0.2, tpot=0.02, e2e=1.0)
    assert slo.met_by(ttft=0.2, tpot=0.02, e2e=1.0)
    assert not slo.met_by(ttft=math.nextafter(0.2, 1), tpot=0.02, e2e=1.0)
    assert not slo.met_by(ttft=0.2, tpot=math.nextafter(0.02, 1), e2e=1.0)
    assert not slo.met_by(ttft=0.2, tpot=0.02, e2e=math.nextafter(1.0, 2))


def test_one_output_token_has_no_tpot_and_meets_any_tpot_target():
    assert SLO(tpot=1e-9).met_by(ttft=0.1, tpot=math.nan, e2e=0.1)
    assert not SLO(ttft=0.05, tpot=1e-9).met_by(ttft=0.1, tpot=math.nan, e2e=0.1)  # TTFT still


def test_no_targets_is_met_by_anything_and_the_slo_is_a_frozen_value():
    assert SLO().met_by(ttft=1e9, tpot=1e9, e2e=1e9)
    slo = SLO(ttft=0.5, tpot=0.05)
    assert slo == SLO(0.5, 0.05) and hash(slo) == hash(SLO(0.5, 0.05))  # positional order
    assert (slo.ttft, slo.tpot, slo.e2e) == (0.5, 0.05, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        slo.ttft = 1.0
