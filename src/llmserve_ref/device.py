"""Pick the torch device that examples, snippets and tests run on.

`LLMSERVE_DEVICE` chooses it (`cpu`, `mps` or `cuda`); unset, the best device
present wins (CUDA, then Apple's MPS, then the CPU). Asking for a device this
machine does not have is an error that says so, never a silent fall back to the
CPU: a reader who set `LLMSERVE_DEVICE=cuda` must not get CPU numbers.

>>> import os
>>> os.environ["LLMSERVE_DEVICE"] = "cpu"
>>> get_device()
device(type='cpu')
>>> del os.environ["LLMSERVE_DEVICE"]
"""

from __future__ import annotations

import os

import torch

DEVICES = ("cpu", "mps", "cuda")


def available(name: str) -> bool:
    """Whether the device `name` (`cpu`, `mps` or `cuda`) is present here."""
    if name == "cpu":
        return True
    if name == "cuda":
        return torch.cuda.is_available()
    if name == "mps":
        return torch.backends.mps.is_available()
    raise ValueError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")


def best_device() -> str:
    """The fastest device present: `cuda`, then `mps`, then `cpu`."""
    return next(d for d in ("cuda", "mps", "cpu") if available(d))


def get_device() -> torch.device:
    """The device named by `LLMSERVE_DEVICE`, or the best one present."""
    name = os.environ.get("LLMSERVE_DEVICE", "").strip().lower() or best_device()
    if name not in DEVICES:
        raise ValueError(
            f"LLMSERVE_DEVICE={name!r} is not a device we know; set it to one of "
            f"{', '.join(DEVICES)} or unset it to use the best one present"
        )
    if not available(name):
        raise RuntimeError(
            f"LLMSERVE_DEVICE={name!r} but this machine has no {name} device; "
            f"unset LLMSERVE_DEVICE or set it to {best_device()!r}"
        )
    return torch.device(name)
