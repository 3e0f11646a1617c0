"""Accelerators the pages reason about, with each number's source.

Each entry records what the roofline, parallelism and KV cache pages need: memory
capacity, memory bandwidth, dense peak FLOP/s in bf16/fp16 and fp8, and the link
the GPU talks to its neighbours over. `GPUS` is the list of data-center GPUs the
KV cache calculator offers; `ACCELERATORS` adds PCIe cards and Apple's laptop
chips. `gpu(name)` finds any of them.

Units. Vendors print "80 GB" on an H100, but HBM and GDDR are built from
power-of-two dies: an 80 GB A100 shows 81920 MiB in `nvidia-smi`, exactly
80 GiB. So this catalog reads a vendor's "N GB" of memory as N GiB (N × 2**30
bytes), and every page reports memory in binary units (KiB, MiB, GiB). The driver
and firmware keep a little of it (an H100 SXM shows 81559 MiB); the utilization
fraction in `kv_math` covers that, so it is not subtracted here. Bandwidths are
the other way round: "3.35 TB/s" is a transfer rate, decimal, 3.35e12 bytes per
second, and so are link speeds.

Dense, not sparse. NVIDIA's datasheets print Tensor Core peaks "with sparsity":
2:4 structured sparsity (two of every four weights zero, and the hardware skips
them) doubles the figure, and a footnote says so. No serving engine runs dense
LLM weights that way, so this catalog stores the dense peak, which is half the
sparse one: `dense(1979)` is the H100 SXM's "1,979 TFLOPS*" bf16 entry halved.
Where a datasheet prints both (A100, L40S, AMD's MI300X), the dense figure is
copied as printed.

Links. NVLink, Infinity Fabric and PCIe figures are the vendors' totals per
GPU, both directions added (an H100's "900 GB/s" NVLink is 450 GB/s each way).

>>> gpu("h100-sxm").memory_bytes == 80 * 2**30
True
>>> h100 = gpu("H100-SXM")
>>> h100.bf16_flops / 1e12, h100.memory_bandwidth / 1e12
(989.5, 3.35)
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
TERA = 1e12
GB = 1e9  # a vendor's GB/s: decimal


def dense(sparse_tflops: float) -> float:
    """FLOP/s of a datasheet peak printed "with sparsity": 2:4 sparsity doubles it.

    >>> dense(1979) / 1e12
    989.5
    """
    return sparse_tflops * TERA / 2


@dataclass(frozen=True)
class GPU:
    """One accelerator: memory, bandwidth, dense peaks, its link to other GPUs, and sources.

    `fp8_flops` is None on chips without fp8 arithmetic (A100, Apple's GPUs);
    `interconnect_bandwidth` is None where there is no GPU-to-GPU link to speak of.
    """

    name: str
    memory_bytes: int
    source: str
    memory_bandwidth: float | None = None  # bytes/s
    bf16_flops: float | None = None  # dense FLOP/s, bf16 (fp16 is the same on every entry)
    fp8_flops: float | None = None  # dense FLOP/s, fp8
    interconnect: str | None = None
    interconnect_bandwidth: float | None = None  # bytes/s, both directions added

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for matmuls in `dtype`: "fp8" where the chip has it, else bf16."""
        flops = self.fp8_flops if dtype == "fp8" and self.fp8_flops else self.bf16_flops
        if flops is None:
            raise ValueError(f"{self.name}: the catalog has no FLOP/s for it")
        return flops

    def ridge_point(self, dtype: str = "bf16") -> float:
        """FLOPs per byte at which compute time equals memory time: peak FLOP/s ÷ bandwidth."""
        if self.memory_bandwidth is None:
            raise ValueError(f"{self.name}: the catalog has no memory bandwidth for it")
        return self.peak_flops(dtype) / self.memory_bandwidth


NVIDIA = "https://www.nvidia.com/en-us/data-center"
A100 = f"{NVIDIA}/a100/ (A100 datasheet: 312 TFLOPS dense bf16; NVLink 600 GB/s)"

GPUS: tuple[GPU, ...] = (
    GPU(
        "L4",
        24 * GIB,
        f"{NVIDIA}/l4/ (L4 datasheet: 24 GB GDDR6, 300 GB/s, bf16 242* "
        "and fp8 485* TFLOPS with sparsity, PCIe Gen4 x16 64 GB/s)",
        300 * GB,
        dense(242),
        dense(485),
        "PCIe Gen4 x16",
        64 * GB,
    ),
    GPU(
        "A100-SXM-40GB",
        40 * GIB,
        f"{A100}, 40 GB HBM2 at 1,555 GB/s",
        1555 * GB,
        312 * TERA,
        None,
        "NVLink 3",
        600 * GB,
    ),
    GPU(
        "A100-SXM-80GB",
        80 * GIB,
        f"{A100}, 80 GB HBM2e at 2,039 GB/s",
        2039 * GB,
        312 * TERA,
        None,
        "NVLink 3",
        600 * GB,
    ),
    GPU(
        "H100-SXM",
        80 * GIB,
        f"{NVIDIA}/h100/ (H100 datasheet, SXM: 80 GB HBM3, 3.35 TB/s, "
        "bf16 1,979* and fp8 3,958* TFLOPS with sparsity, NVLink 900 GB/s)",
        3350 * GB,
        dense(1979),
        dense(3958),
        "NVLink 4",
        900 * GB,
    ),
    GPU(
        "H200-SXM",
        141 * GIB,
        f"{NVIDIA}/h200/ (H200 datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, "
        "bf16 1,979* and fp8 3,958* TFLOPS with sparsity, NVLink 900 GB/s)",
        4800 * GB,
        dense(1979),
        dense(3958),
        "NVLink 4",
        900 * GB,
    ),
    # Early Blackwell announcements said 192 GB and 8 TB/s; the HGX B200 datasheet lists
    # 1,440 GB and 62 TB/s for eight GPUs: 180 GB and 7.7 TB/s each, what a deployment gets.
    GPU(
        "B200",
        180 * GIB,
        f"{NVIDIA}/hgx/ (HGX B200 datasheet: 1,440 GB / 8, 7.7 TB/s per "
        "GPU, bf16 4.5* and fp8 9* PFLOPS with sparsity, NVLink 5 1.8 TB/s)",
        7700 * GB,
        dense(4500),
        dense(9000),
        "NVLink 5",
        1800 * GB,
    ),
    # AMD prints dense and sparse side by side. Seven Infinity Fabric links of 128 GB/s
    # join each MI300X to the seven others of an 8-GPU platform: 896 GB/s in all.
    GPU(
        "MI300X",
        192 * GIB,
        "https://www.amd.com/en/products/accelerators/instinct/mi300/"
        "mi300x.html (MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 1,307.4 TFLOPS dense bf16, "
        "2,614.9 dense fp8, 7 x 128 GB/s Infinity Fabric links)",
        5300 * GB,
        1307.4 * TERA,
        2614.9 * TERA,
        "Infinity Fabric",
        7 * 128 * GB,
    ),
)

# Apple publishes memory and bandwidth for these chips but no GPU FLOP/s. The figure here
# is FP32 ALUs (128 per GPU core) × 2 FLOPs × clock, the way third-party GPU databases
# compute it, for the largest GPU of each chip; Apple GPUs run fp16 at that same rate.
APPLE = "https://www.apple.com/newsroom/"
ACCELERATORS: tuple[GPU, ...] = (
    *GPUS,
    GPU(
        "H100-PCIe",
        80 * GIB,
        f"{NVIDIA}/h100/ (H100 datasheet, PCIe: 80 GB HBM2e, 2 TB/s, "
        "bf16 1,513* and fp8 3,026* TFLOPS with sparsity, PCIe Gen5 128 GB/s)",
        2000 * GB,
        dense(1513),
        dense(3026),
        "PCIe Gen5 x16",
        128 * GB,
    ),
    GPU(
        "L40S",
        48 * GIB,
        f"{NVIDIA}/l40s/ (L40S datasheet: 48 GB GDDR6, 864 GB/s, "
        "362.05 TFLOPS dense bf16, 733 dense fp8, PCIe Gen4 x16 64 GB/s)",
        864 * GB,
        362.05 * TERA,
        733 * TERA,
        "PCIe Gen4 x16",
        64 * GB,
    ),
    GPU(
        "M2-Max",
        96 * GIB,
        f"{APPLE} (M2 Max, Jan 2023: up to 96 GB, 400 GB/s; 38 GPU cores at 1.398 GHz)",
        400 * GB,
        38 * 128 * 2 * 1.398e9,
    ),
    GPU(
        "M3-Max",
        128 * GIB,
        f"{APPLE} (M3 Max, Oct 2023: up to 128 GB, 400 GB/s; 40 GPU cores at 1.398 GHz)",
        400 * GB,
        40 * 128 * 2 * 1.398e9,
    ),
    GPU(
        "M4-Max",
        128 * GIB,
        f"{APPLE} (M4 Max, Oct 2024: up to 128 GB, 546 GB/s; 40 GPU cores at 1.678 GHz)",
        546 * GB,
        40 * 128 * 2 * 1.678e9,
    ),
)


def gpu(name: str) -> GPU:
    """The catalog accelerator called `name` (case does not matter).

    >>> gpu("L4").memory_gib
    24.0
    """
    for candidate in ACCELERATORS:
        if candidate.name.lower() == name.lower():
            return candidate
    known = ", ".join(g.name for g in ACCELERATORS)
    raise ValueError(f"unknown GPU {name!r}; choose one of {known}, or give the memory in bytes")
