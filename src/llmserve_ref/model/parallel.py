"""Tensor and pipeline parallelism, run for real across processes with `torch.distributed`.

**Tensor parallelism** (Megatron-LM, Shoeybi et al. 2019) splits every layer over
`p` GPUs. A *column-parallel* linear layer gives each GPU a slice of the output
features: with the input replicated, each computes its slice, no communication.
A *row-parallel* layer gives each GPU a slice of the input features, so each
computes a partial sum of the full output, and an **all-reduce** adds them. In
a decoder block, q/k/v and gate/up are column-parallel (split by heads and by
MLP width), o_proj and down_proj row-parallel: two all-reduces per layer, each of
one hidden vector per token.

**Pipeline parallelism** gives each GPU a contiguous range of layers (a stage)
and passes activations from stage to stage. With one batch, only one stage
works at a time; GPipe (Huang et al. 2019) splits the batch into `m`
micro-batches so the stages overlap, and leaves an idle *bubble* while the
pipeline fills and drains: a fraction (p - 1) / (m + p - 1) of each stage's time.

Here every GPU is a process on this machine, talking over gloo on 127.0.0.1;
`launch` starts them with `torch.multiprocessing.spawn` and gives up after a
timeout rather than hanging.

>>> tp_allreduce_bytes_per_token(hidden_size=8192, num_layers=80, dtype_bytes=2)
2621440
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from llmserve_ref.kernels.grouped_attention import grouped_attention
from llmserve_ref.model.llama import DecoderLayer, RotaryEmbedding
from llmserve_ref.model.llama_config import ModelConfig


# --8<-- [start:launch]
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(rank: int, fn: Callable, world_size: int, port: int, out: str, args: tuple) -> None:
    torch.set_num_threads(1)  # each process stands for one device
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    try:
        torch.save(fn(rank, world_size, *args), Path(out) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


def launch(fn: Callable, world_size: int, *args, timeout: float = 60.0) -> list:
    """Run `fn(rank, world_size, *args)` in `world_size` processes; return each rank's result.

    `fn` must be importable (a module-level function). Raises TimeoutError, after
    terminating the processes, if they have not all finished within `timeout` seconds.
    """
    with tempfile.TemporaryDirectory() as out:
        context = mp.spawn(
            _run, (fn, world_size, free_port(), out, args), nprocs=world_size, join=False
        )
        deadline = time.monotonic() + timeout
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for process in context.processes:
                    process.terminate()
                raise TimeoutError(f"{world_size} processes did not finish in {timeout} s")
        return [
            torch.load(Path(out) / f"{rank}.pt", weights_only=False) for rank in range(world_size)
        ]


# --8<-- [end:launch]


# --8<-- [start:tp_linear]
class ColumnParallelLinear(nn.Module):
    """This rank's slice of a linear layer's output features; no communication."""

    def __init__(self, full: nn.Linear, rank: int, world_size: int) -> None:
        super().__init__()
        rows = full.out_features // world_size
        self.weight = nn.Parameter(full.weight.detach()[rank * rows : (rank + 1) * rows].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """This rank's slice of the input features: a partial output, summed by an all-reduce."""

    def __init__(self, full: nn.Linear, rank: int, world_size: int) -> None:
        super().__init__()
        cols = full.in_features // world_size
        self.weight = nn.Parameter(full.weight.detach()[:, rank * cols : (rank + 1) * cols].clone())
        self.allreduce_calls = self.allreduce_bytes = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        self.allreduce_calls += 1
        self.allreduce_bytes += out.numel() * out.element_size()
        return out


# --8<-- [end:tp_linear]


# --8<-- [start:tp_block]
class TensorParallelBlock(nn.Module):
    """A `llama.DecoderLayer` split over `world_size` ranks by attention heads and MLP width."""

    def __init__(
        self, block: DecoderLayer, config: ModelConfig, rank: int, world_size: int
    ) -> None:
        super().__init__()
        if config.num_key_value_heads % world_size or config.intermediate_size % world_size:
            raise ValueError(
                f"tensor parallelism over {world_size} ranks needs the KV heads "
                f"({config.num_key_value_heads}) and the MLP width "
                f"({config.intermediate_size}) to be multiples of {world_size}"
            )
        attn, mlp = block.self_attn, block.mlp
        self.input_layernorm = block.input_layernorm  # norms are replicated, not split
        self.post_attention_layernorm = block.post_attention_layernorm
        self.q_proj, self.k_proj, self.v_proj = (
            ColumnParallelLinear(layer, rank, world_size)
            for layer in (attn.q_proj, attn.k_proj, attn.v_proj)
        )
        self.o_proj = RowParallelLinear(attn.o_proj, rank, world_size)
        self.gate_proj = ColumnParallelLinear(mlp.gate_proj, rank, world_size)
        self.up_proj = ColumnParallelLinear(mlp.up_proj, rank, world_size)
        self.down_proj = RowParallelLinear(mlp.down_proj, rank, world_size)
        self.heads = config.num_attention_heads // world_size
        self.kv_heads = config.num_key_value_heads // world_size
        self.head_dim = config.head_dim

    def forward(self, x: torch.Tensor, rope: RotaryEmbedding) -> torch.Tensor:
        batch, T, _ = x.shape
        positions = torch.arange(T)
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(batch, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(batch, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(batch, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        attn = grouped_attention(q, k, v, positions).transpose(1, 2).flatten(2)
        x = x + self.o_proj(attn)  # all-reduce 1
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))  # all-reduce 2


# --8<-- [end:tp_block]


def seeded_block(config: ModelConfig, seed: int = 0) -> tuple[DecoderLayer, RotaryEmbedding]:
    """The same random `DecoderLayer` in every process that asks with the same seed."""
    torch.manual_seed(seed)
    block = DecoderLayer(config)
    for p in block.parameters():
        nn.init.normal_(p, std=0.05)
    return block.eval(), RotaryEmbedding(
        config.head_dim, config.max_position_embeddings, config.rope_theta
    )


def tp_worker(rank: int, world_size: int, config: ModelConfig, batch: int, T: int) -> dict:
    """Run one block tensor-parallel; compare with the whole block run in this process."""
    block, rope = seeded_block(config)
    x = torch.randn(batch, T, config.hidden_size, generator=torch.Generator().manual_seed(1))
    tp = TensorParallelBlock(block, config, rank, world_size)
    with torch.no_grad():
        got = tp(x, rope)
        expected = block(x, rope, torch.arange(T), None, 0)
    row_layers = (tp.o_proj, tp.down_proj)
    return {
        "max_abs_error": (got - expected).abs().max().item(),
        "allreduce_calls": sum(layer.allreduce_calls for layer in row_layers),
        "allreduce_bytes": sum(layer.allreduce_bytes for layer in row_layers),
        "weight_fraction": sum(p.numel() for n, p in tp.named_parameters() if "proj" in n)
        / sum(p.numel() for n, p in block.named_parameters() if "proj" in n),
    }


# --8<-- [start:tp_cost]
def tp_allreduce_bytes_per_token(hidden_size: int, num_layers: int, dtype_bytes: int = 2) -> int:
    """Bytes all-reduced per token in Megatron-style TP: two hidden vectors per layer."""
    return 2 * num_layers * hidden_size * dtype_bytes


def ring_allreduce_seconds(nbytes: float, world_size: int, link_bandwidth: float) -> float:
    """Bandwidth time of a ring all-reduce of `nbytes` over `world_size` GPUs.

    Each GPU sends and receives 2 (p - 1) / p × nbytes; `link_bandwidth` is the
    vendor's per-GPU figure with both directions added, so one direction is half.
    Latency (a few microseconds per all-reduce) is not included.
    """
    return 2 * (world_size - 1) / world_size * nbytes / (link_bandwidth / 2)


# --8<-- [end:tp_cost]


# --8<-- [start:pipeline]
def pipeline_worker(
    rank: int, world_size: int, micro_batches: int, stage_seconds: float, hidden: int
) -> dict:
    """One stage of a forward-only GPipe pipeline; return its busy intervals and outputs.

    Stage `rank` owns one linear layer (the same seeded layers on every rank) and
    spends `stage_seconds` per micro-batch: the layer, then a wait that stands in
    for the device computing (the processes share two CPU cores, so real compute
    on four of them would measure the operating system's scheduler instead).

    Beside the wall-clock intervals (`busy`), each stage keeps a logical clock in
    units of one stage's work (`ticks`): a micro-batch starts when the stage is free
    and its input is done upstream (the upstream end tick travels with the
    activations), and takes one tick. The ticks are the schedule the messages allow,
    free of the noise of a shared machine's clock.
    """
    torch.manual_seed(0)
    layers = [nn.Linear(hidden, hidden) for _ in range(world_size)]
    inputs = torch.randn(micro_batches, 4, hidden, generator=torch.Generator().manual_seed(1))
    busy, ticks, outputs, sends = [], [], [], []
    free = 0  # the tick at which this stage is free again
    for i in range(micro_batches):
        x = inputs[i] if rank == 0 else torch.empty(4, hidden)
        done_upstream = torch.zeros(1, dtype=torch.int64)
        if rank > 0:
            dist.recv(x, src=rank - 1)
            dist.recv(done_upstream, src=rank - 1)
        start = time.perf_counter()
        with torch.no_grad():
            y = torch.tanh(layers[rank](x))
        time.sleep(max(0.0, stage_seconds - (time.perf_counter() - start)))
        busy.append((start, time.perf_counter()))
        first = max(free, int(done_upstream))
        free = first + 1
        ticks.append((first, free))
        if rank < world_size - 1:
            end_tick = torch.tensor([free], dtype=torch.int64)
            sends += [(y, dist.isend(y, dst=rank + 1)), (end_tick, dist.isend(end_tick, rank + 1))]
        else:
            outputs.append(y)
    for _, request in sends:  # the tensors stay referenced until their sends complete
        assert request is not None  # isend gives None only to ranks outside the group
        request.wait()
    expected = []
    if rank == world_size - 1:  # the whole model, sequentially, for comparison
        with torch.no_grad():
            for x in inputs:
                for layer in layers:
                    x = torch.tanh(layer(x))
                expected.append(x)
    return {"busy": busy, "ticks": ticks, "outputs": outputs, "expected": expected}


def bubble_fraction(busy_by_stage: list[list[tuple[float, float]]]) -> float:
    """Idle share of the stages between the first start and the last end, from timestamps."""
    start = min(b[0][0] for b in busy_by_stage)
    end = max(b[-1][1] for b in busy_by_stage)
    busy = sum(e - s for stage in busy_by_stage for s, e in stage)
    return 1 - busy / (len(busy_by_stage) * (end - start))


def gpipe_bubble(stages: int, micro_batches: int) -> float:
    """GPipe's bubble for forward-only equal stages: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


# --8<-- [end:pipeline]
