"""Latency distributions of a short benchmark of our server, run when the site is built."""

from matplotlib.figure import Figure

from llmserve_ref.bench.bench_client import BenchConfig, run
from llmserve_ref.bench.bench_metrics import plot_cdfs
from llmserve_ref.planning.workload import Fixed
from llmserve_ref.serving.launcher import serve_in_thread


def figure() -> Figure:
    """CDFs of TTFT, TPOT, ITL and E2E: 4 users, 8 requests of 16 tokens, after warm-up."""
    with serve_in_thread("tiny") as server:
        config = BenchConfig(
            server.url,
            max_concurrency=4,
            num_prompts=8,
            input_len=Fixed(32),
            output_len=Fixed(16),
            ignore_eos=True,
            num_warmups=4,
        )
        result = run(config)
    fig = plot_cdfs(result.records)
    fig.suptitle("Our server, tiny model on this machine's CPU, 4 concurrent users", fontsize=11)
    return fig
