"""Keep freed memory in the process: a prompt step's big tensors, without page faults.

A CPU tensor's memory comes from C's ``malloc``. glibc's ``malloc`` serves a large
request (from 128 KiB, a threshold it raises as it sees big blocks freed) with a fresh
``mmap`` that ``free`` hands back to the kernel, and it gives back the free memory at
the top of its heap once there is more than a trimming threshold of it. A forward pass
over a few hundred tokens allocates and frees tensors of a few MiB each (512 tokens of
the tiny model's 688-wide MLP: 1.3 MiB), so each step asks the kernel for memory it
returned the step before, and the kernel maps it a 4 KiB page at a time, one page fault
per page, the first time the step writes it: thousands of faults a step, in the middle
of the arithmetic (measured, in-process: `benchmarks/profile_engine.py`).

`keep_freed_memory` sets both thresholds (``mallopt``) so that blocks up to 32 MiB come
from the heap and the heap keeps what is freed: the next step reuses memory that is
already mapped. vLLM's CPU backend does the same with another allocator: it preloads
TCMalloc (``LD_PRELOAD``, in ``vllm/platforms/cpu.py``), which keeps freed memory too.
The serving processes call it at start; where ``malloc`` is not glibc's (macOS, musl)
it does nothing.

>>> import platform
>>> keep_freed_memory() == (platform.libc_ver()[0] == "glibc")  # False: nothing changed
True
"""

from __future__ import annotations

import ctypes
import functools
import platform

# mallopt's parameter numbers, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # the largest glibc accepts on a 64-bit machine
TRIM_THRESHOLD = 256 * 2**20  # free memory at the heap's top past which glibc returns it


# --8<-- [start:keep]
@functools.cache  # once per process: the settings are the process's
def keep_freed_memory() -> bool:
    """Have glibc's ``malloc`` keep freed blocks of up to 32 MiB for reuse; False where the
    C library is not glibc (nothing is changed)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the C library this process already runs on
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


# --8<-- [end:keep]
