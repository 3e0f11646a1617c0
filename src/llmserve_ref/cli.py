"""The ``llmserve-ref`` command. Each subcommand is one small function that adds its parser.

    llmserve-ref serve [--model tiny] [--host 127.0.0.1] [--port 8000]
    llmserve-ref bench [--base-url URL] [--concurrency N | --request-rate R] ...

A subcommand's function adds an argparse subparser and sets ``run`` to the
function that does the work; `main` parses and calls it. The work functions
import their module when they run, so one subcommand's dependencies (the
server's uvicorn, say) are not needed by another.

>>> parser = build_parser()
>>> args = parser.parse_args(["serve", "--port", "0"])
>>> args.model, args.host, args.port
('tiny', '127.0.0.1', 0)
"""

from __future__ import annotations

import argparse
import sys

from llmserve_ref.engine import MODELS


def add_serve(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="serve a tiny model over the OpenAI API")
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="tiny",
        help="tiny (the target model) or tiny-draft",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: local only)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long in-flight requests may still run",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    parser.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from llmserve_ref.server import serve

    serve(args.model, args.host, args.port, args.shutdown_grace, args.log_level)
    return 0


def add_bench(commands: argparse._SubParsersAction) -> None:
    # Its options belong to llmserve_ref.bench_client, which parses them (and --help) itself.
    parser = commands.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible streaming endpoint",
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER)
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from llmserve_ref.bench_client import cli

    cli(args.args)
    return 0


SUBCOMMANDS = [add_serve, add_bench]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmserve-ref", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
