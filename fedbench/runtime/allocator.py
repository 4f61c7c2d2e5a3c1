"""Keep freed memory in a training process, so that each step's activations do not fault in afresh.

glibc's malloc gives memory back to the system as soon as more than its trim threshold lies free at the top of a
heap. Its thresholds adapt to the largest block freed so far (a 1.2 MB activation sets them near 2.4 MB), so a
training step, which frees several MB of activations and gradients at its end, can land above the threshold on
every step: the memory is returned, and the next step faults it in again page by page. Whether a process falls into
this depends on its heap's history. Measured on the cli_overhead workload's jobs (LeNet-5, batch 64, Ray actors
on 2 cores, bench/job_cpu.py): an actor that fell into it took 10,000-90,000 page faults per 0.3 s job and 5-45%
more CPU than one that did not. Fixing both thresholds keeps the memory for the next step. A worker then holds at
most `TRIM_THRESHOLD` of freed memory, which it had used at its peak anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (glibc's malloc.h)."""

MMAP_THRESHOLD = 32 * 1024 * 1024
"""Blocks up to this size come from the heap, where freed ones are reused, not from a mapping of their own that is
unmapped on free. 32 MiB is the largest value glibc accepts on 64-bit systems. Setting a threshold stops glibc
from adapting it, so this one has to be set too."""

TRIM_THRESHOLD = 256 * 1024 * 1024
"""Free memory at the top of a heap that stays with the process. This is more than a training step of the zoo's
larger models frees: torchvision's ResNet-18 at CIFAR's size and batch 64 peaks about 130 MB above its weights."""


@functools.cache
def keep_freed_memory() -> bool:
    """Fix glibc malloc's mmap and trim thresholds in this process (once); False where the C library is not glibc
    (macOS, musl), whose allocators behave otherwise and are left alone."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
