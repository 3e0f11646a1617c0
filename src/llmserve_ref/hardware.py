"""Accelerators the pages reason about, with each number's source.

Only memory capacity is recorded so far: that is what KV cache size math needs.
Pages about the roofline and about cost add fields (memory bandwidth, FLOP/s) to
`GPU` here rather than keeping a second catalog, which is why the names already
tell the SXM parts from PCIe cards whose bandwidth differs.

Units. Vendors print "80 GB" on an H100, but HBM and GDDR are built from
power-of-two dies: an 80 GB A100 shows 81920 MiB in `nvidia-smi`, exactly
80 GiB. So this catalog reads a vendor's "N GB" as N GiB (N × 2**30 bytes), and
every page reports memory in binary units (KiB, MiB, GiB). The driver and
firmware keep a little of it (an H100 SXM shows 81559 MiB); the utilization
fraction in `kv_math` covers that, so it is not subtracted here.

>>> gpu("h100-sxm").memory_bytes == 80 * 2**30
True
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class GPU:
    """One accelerator: its name, its memory in bytes, and where the number comes from."""

    name: str
    memory_bytes: int
    source: str

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


GPUS: tuple[GPU, ...] = (
    GPU("L4", 24 * GIB, "https://www.nvidia.com/en-us/data-center/l4/ (24 GB GDDR6)"),
    GPU("A100-SXM-40GB", 40 * GIB, "https://www.nvidia.com/en-us/data-center/a100/ (40 GB HBM2)"),
    GPU("A100-SXM-80GB", 80 * GIB, "https://www.nvidia.com/en-us/data-center/a100/ (80 GB HBM2e)"),
    GPU("H100-SXM", 80 * GIB, "https://www.nvidia.com/en-us/data-center/h100/ (80 GB HBM3)"),
    GPU("H200-SXM", 141 * GIB, "https://www.nvidia.com/en-us/data-center/h200/ (141 GB HBM3e)"),
    # Early Blackwell announcements said 192 GB (eight 24 GB stacks); shipping HGX/DGX B200
    # systems list 1,440 GB for eight GPUs, 180 GB each, and that is what a deployment gets.
    GPU("B200", 180 * GIB, "https://www.nvidia.com/en-us/data-center/dgx-b200/ (1,440 GB / 8)"),
    GPU(
        "MI300X",
        192 * GIB,
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (192 GB HBM3)",
    ),
)


def gpu(name: str) -> GPU:
    """The catalog GPU called `name` (case does not matter).

    >>> gpu("L4").memory_gib
    24.0
    """
    for candidate in GPUS:
        if candidate.name.lower() == name.lower():
            return candidate
    known = ", ".join(g.name for g in GPUS)
    raise ValueError(f"unknown GPU {name!r}; choose one of {known}, or give the memory in bytes")
