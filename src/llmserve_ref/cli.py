"""The ``llmserve-ref`` command. Each subcommand is one small function that adds its parser.

    llmserve-ref serve [--model tiny] [--host 127.0.0.1] [--port 8000] [--engine batched]
                       [--max-num-seqs N] [--max-num-batched-tokens N] [--block-size N]
                       [--[no-]enable-prefix-caching] [--max-model-len N]
                       [--kv-cache-memory-bytes BYTES] [--speculative-config JSON]
                       [--api-key KEY] [--allowed-origins JSON_LIST]
                       [--max-request-bytes BYTES] [--max-stop-strings N] [--max-stop-chars N]
                       [--max-pending-seqs N] [--header-timeout S] [--body-timeout S]
    llmserve-ref bench [--base-url URL] [--max-concurrency N] [--request-rate R] ...
    llmserve-ref --version     # the release and the package's content hash

A subcommand's function adds an argparse subparser and sets ``run`` to the
function that does the work; `main` parses and calls it. Only the standard library
is imported at the top: a subcommand's parser imports the settings classes whose
defaults it offers, and its work function the module that does the work, when they
run. So ``import llmserve_ref.cli`` loads no torch, and one subcommand's
dependencies (the server's uvicorn, say) are not needed by another.

>>> parser = build_parser()
>>> args = parser.parse_args(["serve", "--port", "0"])
>>> args.model, args.host, args.port, args.engine
('tiny', '127.0.0.1', 0, 'batched')
>>> engine_config(parser.parse_args(["serve", "--kv-cache-memory-bytes", "1GiB"]))
EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048, block_size=16, \
enable_prefix_caching=True, max_model_len=None, kv_cache_memory_bytes=1073741824, \
speculative_config=None, compile=False)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmserve_ref.engine.engine_config import EngineConfig
    from llmserve_ref.engine.speculative_config import SpeculativeConfig
    from llmserve_ref.serving.limits import Limits

SIZE = re.compile(r"(\d+(?:\.\d+)?)([A-Za-z]*)")


def size_suffixes() -> dict[str, int]:
    """vLLM's reading of a size's suffix: an uppercase letter is binary (``G``), a
    lowercase one decimal (``g``), and the IEC names (``GiB``) are always binary.

    >>> size_suffixes()["G"], size_suffixes()["g"], size_suffixes()["GiB"]
    (1073741824, 1000000000, 1073741824)
    """
    from llmserve_ref.planning.kv_math import UNITS

    suffixes = {"": 1}
    for power, unit in enumerate(UNITS[1:], start=1):
        suffixes |= {unit: 1024**power, unit[0]: 1024**power, unit[0].lower(): 1000**power}
    return suffixes


def memory_bytes(text: str) -> int:
    """Bytes from a size as vLLM reads it: ``1073741824``, ``1G`` or ``1GiB`` (binary),
    ``1g`` or ``25.6k`` (decimal).

    >>> memory_bytes("64M"), memory_bytes("64m"), memory_bytes("64MiB"), memory_bytes("25.6k")
    (67108864, 64000000, 67108864, 25600)
    """
    match, suffixes = SIZE.fullmatch(text.strip()), size_suffixes()
    if match is None or match[2] not in suffixes:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a byte count (try 67108864, 64M or 64MiB; 64m is decimal)"
        )
    return int(float(match[1]) * suffixes[match[2]])


def speculative_config(text: str) -> SpeculativeConfig:
    """``--speculative-config`` as vLLM takes it: a JSON object of vLLM's keys, checked.

    >>> speculative_config('{"method": "ngram", "num_speculative_tokens": 4}').prompt_lookup_max
    5
    """
    from llmserve_ref.engine.speculative_config import SpeculativeConfig

    try:
        return SpeculativeConfig.from_json(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def origins(text: str) -> list[str]:
    """Web origins as vLLM's --allowed-origins reads them: a JSON list of strings.

    >>> origins('["https://app.example"]')
    ['https://app.example']
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(o, str) for o in value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a JSON list of origins (try '[\"https://app.example\"]')"
        )
    return value


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that ends each option's help with its default, except where the
    help states the default in its own words: ``--api-key``'s comes from the environment and
    is a secret, which ``--help`` must not print."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.help and "default" in action.help:
            return action.help
        return super()._get_help_string(action)


def add_serve(commands: argparse._SubParsersAction) -> None:
    from llmserve_ref.model.weights import MODEL_DIRS

    parser = commands.add_parser(
        "serve", help="serve a tiny model over the OpenAI API", formatter_class=HelpWithDefaults
    )
    parser.add_argument(
        "--model",
        choices=sorted(MODEL_DIRS),
        default="tiny",
        help="tiny (the target model) or tiny-draft",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind; 127.0.0.1: local only"
    )
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long in-flight requests may still run",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="the server's log level (uvicorn's)",
    )
    parser.add_argument(
        "--engine",
        choices=["batched", "loop"],
        default="batched",
        help="batched: continuous batching on paged KV; loop: one forward pass per request",
    )
    add_engine_flags(parser.add_argument_group("batched engine (vLLM's flags, same meaning)"))
    add_access_flags(parser.add_argument_group("access"))
    add_limit_flags(parser.add_argument_group("limits (each refusal is an OpenAI error naming it)"))
    parser.set_defaults(run=run_serve)


def add_engine_flags(group: argparse._ArgumentGroup) -> None:
    """The batched engine's knobs, with `EngineConfig`'s defaults."""
    from llmserve_ref.engine.engine_config import EngineConfig

    defaults = EngineConfig()
    group.add_argument(
        "--max-num-seqs",
        type=int,
        default=defaults.max_num_seqs,
        help="sequences running at once, at most",
    )
    group.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=defaults.max_num_batched_tokens,
        help="tokens in one forward pass (the token budget)",
    )
    group.add_argument(
        "--block-size", type=int, default=defaults.block_size, help="tokens per KV cache block"
    )
    group.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=defaults.enable_prefix_caching,
        help="reuse the KV blocks of a prompt prefix seen before",
    )
    group.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="prompt and output tokens of one sequence; None: the model's max_position_embeddings",
    )
    group.add_argument(
        "--kv-cache-memory-bytes",
        type=memory_bytes,
        default=defaults.kv_cache_memory_bytes,
        help="KV cache size, e.g. 67108864 or 64MiB",
    )
    group.add_argument(
        "--speculative-config",
        type=speculative_config,
        default=defaults.speculative_config,
        help="speculative decoding, as vLLM takes it: a JSON object, e.g. "
        """'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}' or """
        """'{"method": "draft_model", "model": "tiny-draft", "num_speculative_tokens": 4}'; """
        "None: off",
    )
    group.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=defaults.compile,
        help="run steps as torch.compile graphs: decode steps one per batch size (1, 2, 4, "
        "then every multiple of 8 below --max-num-seqs, and it), every other step one graph "
        "of any number of tokens; compiled at startup (vLLM compiles unless --enforce-eager)",
    )


def add_access_flags(group: argparse._ArgumentGroup) -> None:
    """Who may call the server: an API key, and web origins (CORS)."""
    group.add_argument(
        "--api-key",
        default=os.environ.get("LLMSERVE_API_KEY"),
        help="clients must send 'Authorization: Bearer KEY' to /v1/* (default: "
        "$LLMSERVE_API_KEY; unset: no key)",
    )
    group.add_argument(
        "--allowed-origins",
        type=origins,
        default=[],
        help="web origins whose pages may call the server from a browser (CORS), as vLLM "
        """takes them: a JSON list, e.g. '["https://app.example"]'; []: none""",
    )


def add_limit_flags(group: argparse._ArgumentGroup) -> None:
    """What one request may ask of the server, with `Limits`' defaults."""
    from llmserve_ref.serving.limits import Limits

    defaults = Limits()
    group.add_argument(
        "--max-request-bytes",
        type=memory_bytes,
        default=defaults.max_request_bytes,
        help="a request's JSON body, e.g. 1048576 or 1MiB; larger: 413",
    )
    group.add_argument(
        "--max-stop-strings",
        type=int,
        default=defaults.max_stop_strings,
        help="stop strings in one request",
    )
    group.add_argument(
        "--max-stop-chars",
        type=int,
        default=defaults.max_stop_chars,
        help="characters in one stop string",
    )
    group.add_argument(
        "--max-pending-seqs",
        type=int,
        default=defaults.max_pending_seqs,
        help="sequences running or waiting; beyond it, 429 with Retry-After",
    )
    group.add_argument(
        "--header-timeout",
        type=float,
        default=defaults.header_timeout_s,
        metavar="SECONDS",
        help="from connecting (or the last response) to a request's full headers",
    )
    group.add_argument(
        "--body-timeout",
        type=float,
        default=defaults.body_timeout_s,
        metavar="SECONDS",
        help="from a request's full headers to its full body",
    )


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The batched engine's settings from ``serve``'s flags."""
    from llmserve_ref.engine.engine_config import EngineConfig

    return EngineConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching,
        max_model_len=args.max_model_len,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        speculative_config=args.speculative_config,
        compile=args.compile,
    )


def server_limits(args: argparse.Namespace) -> Limits:
    """The server's limits from ``serve``'s flags."""
    from llmserve_ref.serving.limits import Limits

    return Limits(
        max_request_bytes=args.max_request_bytes,
        max_stop_strings=args.max_stop_strings,
        max_stop_chars=args.max_stop_chars,
        max_pending_seqs=args.max_pending_seqs,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
    )


def run_serve(args: argparse.Namespace) -> int:
    from llmserve_ref.serving.app import Access
    from llmserve_ref.serving.launcher import serve

    serve(
        args.model,
        args.host,
        args.port,
        args.shutdown_grace,
        args.log_level,
        args.engine,
        engine_config(args),
        server_limits(args),
        Access(args.api_key, tuple(args.allowed_origins)),
    )
    return 0


def add_bench(commands: argparse._SubParsersAction) -> None:
    # Its options belong to bench.bench_cli, which parses them (and --help) itself.
    parser = commands.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible streaming endpoint",
        add_help=False,
        prefix_chars="+",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER)
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from llmserve_ref.bench.bench_cli import cli

    cli(args.args)
    return 0


SUBCOMMANDS = [add_serve, add_bench]


def build_parser() -> argparse.ArgumentParser:
    import llmserve_ref

    parser = argparse.ArgumentParser(prog="llmserve-ref", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {llmserve_ref.__version__}",
        help="print the version, the release and the package's content hash, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
