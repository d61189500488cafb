"""glibc malloc settings for a server that moves large buffers: keep freed memory for reuse.

A server's hot path allocates and frees buffers of 64-256 KiB many times a second: what a socket
read returns, a run of messages joined into one write. With glibc's defaults a freed block at the
top of the heap past 128 KiB is given back to the kernel (``brk``) and the next allocation of that
size faults its pages in again; a block past the (dynamic) mmap threshold gets its own ``mmap``,
faulted in page by page, then ``munmap``. Under a 1 KiB pub->sub stream across a route that page
faulting was about a fifth of each server's CPU (perf: ``exc_page_fault`` under ``memmove``).

``tune_malloc`` raises both thresholds once at startup, so such buffers come from, and go back
to, memory the process keeps: at most ``TRIM_THRESHOLD`` of free heap is held past its use.
Either glibc variable (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``) set in the
environment wins: the operator's choice is left alone. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger("leafjet.malloc")

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 8 << 20  # a block this large still gets its own mmap (glibc caps it at 32 MiB)
TRIM_THRESHOLD = 32 << 20  # free memory at the heap's top kept for reuse

_ENV_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def tune_malloc() -> bool:
    """Apply the settings (module docstring); True when glibc took them."""
    if not sys.platform.startswith("linux") or any(v in os.environ for v in _ENV_VARS):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # only glibc (musl's mallopt is a stub)
            return False
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # Setting either threshold also turns off glibc's dynamic adjustment of both.
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not ok:
        log.warning("glibc refused the malloc thresholds; large buffers are faulted in afresh")
    return ok
