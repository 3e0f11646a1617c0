"""A service-level objective: the latency targets a request must meet to count towards goodput.

Throughput counts every token; goodput counts only the requests served well
enough, so it says how much load a server carries at a given quality
(DistServe, arXiv:2401.09670). The same targets judge a simulated request
(`llmserve_ref.planning.simulator`) and a measured one
(`llmserve_ref.bench.bench_metrics`); each passes its own latencies.

>>> slo = SLO(ttft=0.5, tpot=0.05)
>>> slo.met_by(ttft=0.2, tpot=0.04, e2e=4.2), slo.met_by(ttft=0.2, tpot=0.06, e2e=6.2)
(True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass


# --8<-- [start:slo]
@dataclass(frozen=True)
class SLO:
    """Latency targets in seconds; a request must meet every one given (None: no target).

    A request with one output token has no TPOT (NaN), and meets any TPOT target.
    """

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def met_by(self, ttft: float, tpot: float, e2e: float) -> bool:
        """Whether a request with these latencies meets every target."""
        return (
            (self.ttft is None or ttft <= self.ttft)
            and (self.tpot is None or math.isnan(tpot) or tpot <= self.tpot)
            and (self.e2e is None or e2e <= self.e2e)
        )


# --8<-- [end:slo]
