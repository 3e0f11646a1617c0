"""Measure this machine's roof, and how close a decoding model gets to it.

Datasheet peaks are promises; this module measures what the device in front of
you delivers, with the method spelled out:

- **Memory bandwidth**: a matrix-vector product over a 256 MiB matrix, far larger
  than any cache, does 2 FLOPs per 4-byte element, so it is limited only by how
  fast the matrix streams in. Bytes counted: the matrix, read once. (A copy would
  also work, but whether it moves 2 or 3 times its size depends on whether the
  CPU reads each destination line before writing it.)
- **Matmul FLOP/s**: a square matmul of side 2048, 2 n³ FLOPs.
- **Threads**: on a CPU shared with other processes, an op split over two
  threads waits for the slower one, and a thread that lost its core stalls every
  op by a scheduler time slice. `torch_threads(1)` makes such runs repeatable.
- **Timing**: one untimed warm-up call, then the median of repeated calls, with
  the device synchronized around each. Functions measured together are
  interleaved round by round (`interleaved`), so that a slow spell on a shared
  machine hits all of them alike and their ratios stay meaningful.

`decode_steppers` builds decode steps of a real `Llama` at several batch sizes (with
`llmserve_ref.model.forward_step`), which the roofline page times side by side and
compares with `StepCost`'s prediction.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch

from llmserve_ref.device import get_device
from llmserve_ref.model.forward_step import forward_step
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.planning.roofline import Roof

MIB = 2**20


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the body with torch using `n` CPU threads, then restore the previous count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --8<-- [start:timing]
def interleaved(
    fns: dict[str, Callable[[], object]], rounds: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of each function, measured side by side.

    Every function runs once untimed (warm-up), then each round calls each of
    them once, in a rotated order, so noise from other processes is shared.
    """
    for fn in fns.values():
        fn()
    synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            synchronize(device)
            start = time.perf_counter()
            fns[name]()
            synchronize(device)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


# --8<-- [end:timing]


# --8<-- [start:probes]
def bandwidth_probe(device: torch.device, nbytes: int = 256 * MIB) -> tuple[Callable, int]:
    """A call that streams `nbytes` from memory (matrix × vector), and the bytes it reads."""
    matrix = torch.randn(4096, nbytes // 4 // 4096, device=device)
    vector = torch.randn(matrix.shape[1], device=device)
    return (lambda: torch.mv(matrix, vector)), matrix.numel() * matrix.element_size()


def matmul_probe(
    device: torch.device, n: int = 2048, dtype: torch.dtype = torch.float32
) -> tuple[Callable, int]:
    """A call that multiplies two n × n matrices, and the FLOPs it does (2 n³)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return (lambda: a @ b), 2 * n**3


def this_machine(rounds: int = 7, device: torch.device | None = None) -> Roof:
    """This device's measured roof: fp32 matmul FLOP/s and streaming-read bytes/s."""
    device = device or get_device()
    read, nbytes = bandwidth_probe(device)
    matmul, flops = matmul_probe(device)
    seconds = interleaved({"read": read, "matmul": matmul}, rounds, device)
    return Roof(
        f"this machine ({device.type}, fp32)", flops / seconds["matmul"], nbytes / seconds["read"]
    )


# --8<-- [end:probes]


# --8<-- [start:decode]
# A Llama of about 400 MB in fp32: 12 times the 32 MiB last-level cache of a server CPU,
# so each decode step streams its weights from DRAM.
PROBE_CONFIG = ModelConfig(
    vocab_size=8192,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=512,
)


def random_llama(config: ModelConfig = PROBE_CONFIG, device: torch.device | None = None) -> Llama:
    """A `Llama` with random weights (speed does not depend on their values)."""
    torch.manual_seed(0)
    return Llama(config).to(device or get_device()).eval()


def decode_steppers(
    model: Llama, batch_sizes: Iterable[int], context: int
) -> dict[int, Callable[[], object]]:
    """For each batch size, a call that runs one decode step after `context` cached tokens.

    Each batch has its own cache; every call decodes the same token at the same
    context, so a call can repeat forever.
    """
    return {batch: forward_step(model, batch, context, width=1) for batch in batch_sizes}


# --8<-- [end:decode]
