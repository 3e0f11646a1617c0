"""The guesses' speedup against the number of users: both engines, both ways of guessing,
both workloads.

Drawn from what the page's benchmark block printed when `nox -s engines -- --record-outputs`
last ran it, and only while that recording is current: each point is an `x` of its table,
the guessing server's median output tokens/s over plain's at that load.
"""

import re
from pathlib import Path

from matplotlib.figure import Figure
from recorded_outputs import current_output

PAGE = Path(__file__).resolve().parents[1] / "speculative-decoding.md"
MARKER = "x: guessing vs plain"  # in the title line of each workload's table
# users, engine, guesses (ngram or draft), plain tok/s, guessing tok/s, x (of output tok/s), ...
ROW = re.compile(r"^\s*(\d+)\s+(vLLM|llmserve-ref)\s+(ngram|draft)\s+\S+\s+\S+\s+(\d+\.\d+)\s")


def speedups(output: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """workload -> "engine guesses" -> [(users, x)], read from the block's printed tables."""
    tables: dict[str, dict[str, list[tuple[int, float]]]] = {}
    workload = ""
    for line in output.splitlines():
        if MARKER in line:
            workload = line.split(":")[0]
            tables[workload] = {}
        elif workload and (row := ROW.match(line)):
            users, engine, method, x = row.groups()
            tables[workload].setdefault(f"{engine} {method}", []).append((int(users), float(x)))
    return tables


def figure() -> Figure:
    """One panel per workload: x against users, a line per engine and way of guessing, 1 (no
    gain) dashed."""
    output = current_output(PAGE, "cpu", MARKER)
    fig = Figure(figsize=(9.5, 3.8), layout="constrained")
    if output is None:
        fig.text(
            0.5,
            0.5,
            "No current recording of the measurement: "
            "nox -s engines -- --record-outputs records it again",
            ha="center",
        )
        return fig
    tables = speedups(output)
    panels = fig.subplots(1, len(tables), sharey=True)
    for panel, (workload, engines) in zip(panels, tables.items(), strict=True):
        for server, points in engines.items():
            users, x = zip(*points, strict=True)
            panel.plot(users, x, "o-" if "ngram" in server else "s--", label=server)
        panel.axhline(1.0, color="k", linestyle="--", linewidth=1, label="no gain")
        panel.set_xscale("log", base=2)
        panel.set_xticks(users, [str(u) for u in users])
        panel.set_xlabel("concurrent users")
        panel.set_title(workload)
    panels[0].set_ylabel("output tokens/s, guessing / plain (medians)")
    panels[0].legend(fontsize=8)
    return fig
