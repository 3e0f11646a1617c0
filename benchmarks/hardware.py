"""This machine's roof, decode against it, and quantized decode, measured side by side.

    python benchmarks/hardware.py [--rounds 7]

Prints the measured memory bandwidth and matmul FLOP/s, the bytes per second a batch-1
decode step of a ~400 MB random Llama moves as a fraction of that bandwidth, the
throughput ratio of batch 16 to batch 1, and the memory and speed of int8/int4
weights against fp32. Every probe of one table is interleaved round by round and
reported as a median (see `llmserve_ref.planning.measure`). On a CPU torch runs on one thread,
so that other processes on a shared machine do not stall its parallel regions.
"""

from __future__ import annotations

import argparse
import copy

import torch

from llmserve_ref.device import get_device
from llmserve_ref.model.quantization import model_bytes, quantize_linears
from llmserve_ref.planning.measure import (
    bandwidth_probe,
    decode_steppers,
    interleaved,
    matmul_probe,
    random_llama,
    torch_threads,
)
from llmserve_ref.planning.model_catalog import CatalogModel
from llmserve_ref.planning.roofline import Roof, StepCost

BATCHES = (1, 4, 16, 64)
CONTEXT = 32


def main(rounds: int) -> None:
    device = get_device()
    threads = 1 if device.type == "cpu" else torch.get_num_threads()
    with torch_threads(threads):
        probe = random_llama(device=device)
        read, read_bytes = bandwidth_probe(device)
        matmul, matmul_flops = matmul_probe(device)
        steps = decode_steppers(probe, BATCHES, CONTEXT)
        seconds = interleaved(
            {"read": read, "matmul": matmul, **{b: steps[b] for b in BATCHES}}, rounds, device
        )
        variants = {
            "fp32": probe,
            "int8": quantize_linears(copy.deepcopy(probe), bits=8),
            "int4 (group 128)": quantize_linears(copy.deepcopy(probe), bits=4, group_size=128),
        }
        if device.type == "cpu":
            variants["int8 fused"] = quantize_linears(copy.deepcopy(probe), bits=8, fused=True)
        quant = interleaved(
            {name: decode_steppers(m, [1], CONTEXT)[1] for name, m in variants.items()},
            rounds,
            device,
        )

    bandwidth = read_bytes / seconds["read"]
    flops = matmul_flops / seconds["matmul"]
    spec = CatalogModel(
        "probe", "random weights", probe.num_parameters(), probe.config.to_hf_dict()
    )
    here = Roof(f"this machine ({device.type}, fp32)", flops, bandwidth)
    cost = StepCost(spec, here, weight_dtype="fp32", kv_dtype="fp32")
    print(f"device {device.type}, {threads} thread(s), {rounds} rounds, medians")
    print(f"memory bandwidth (streaming read)  {bandwidth / 1e9:8.1f} GB/s")
    print(f"matmul fp32 (2048^3)               {flops / 1e9:8.1f} GFLOP/s")
    print(f"ridge point                        {flops / bandwidth:8.1f} FLOPs/byte")
    print(f"probe model                        {cost.weight_bytes / 2**20:8.0f} MiB fp32")
    for b in BATCHES:
        t = seconds[b]
        fraction = cost.bytes_moved(b, b * CONTEXT) / t / bandwidth
        roofline = cost.decode_step_time(b, CONTEXT)
        print(
            f"decode batch {b:2}: {t * 1e3:7.1f} ms/step, {b / t:7.1f} tokens/s, "
            f"{fraction:4.0%} of bandwidth, roofline {roofline * 1e3:6.1f} ms"
        )
    print(f"throughput batch 16 / batch 1      {seconds[1] * 16 / seconds[16]:8.2f}x")
    base_bytes, base_time = model_bytes(probe), quant["fp32"]
    for name, m in variants.items():
        print(
            f"{name:17} memory {model_bytes(m) / base_bytes:5.2f}x of fp32, "
            f"decode speed {base_time / quant[name]:5.2f}x of fp32 ({quant[name] * 1e3:.1f} ms)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per probe")
    main(parser.parse_args().rounds)
