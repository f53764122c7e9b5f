"""Peak memory of a block of code: resident memory (RSS) on CPU, allocated tensors on CUDA.

The process's resident-set high-water mark (``VmHWM`` in ``/proc/self/status``,
``ru_maxrss``) is set by whichever phase used the most memory — often building the
model or loading weights — so "peak after minus peak before" reads 0 for a smaller
forward pass. Linux lets a process reset the mark: writing ``5`` to
``/proc/self/clear_refs`` sets ``VmHWM`` back to the current ``VmRSS``.
:func:`peak_rss_growth` does that at the start of the block (after returning free
heap memory to the system with glibc's ``malloc_trim``, so the allocator's cache of
earlier, freed tensors is not counted as in use), and reports how far the block
pushed the resident set above its level at the start.

The figure is resident memory, not tensor bytes: it counts pages actually touched
(``torch.empty`` that is never written costs nothing), allocator overhead and any
code or data loaded for the first time inside the block (run a warm-up first).
Where the mark cannot be reset (not Linux, ``/proc`` read-only) it falls back to
``ru_maxrss`` and says so (``reset=False``): the growth is then only a lower bound.

On CUDA, :func:`peak_cuda_growth` reads PyTorch's caching allocator instead: the peak of
``torch.cuda.max_memory_allocated`` over the block (its counter reset at the start) and
its growth above ``torch.cuda.memory_allocated`` at the start, i.e. tensor bytes, not the
allocator's reserved cache nor the CUDA context.
"""
import contextlib
import ctypes
import ctypes.util
import resource
import sys
from dataclasses import dataclass

import torch

_STATUS = '/proc/self/status'
_CLEAR_REFS = '/proc/self/clear_refs'


def _status_mb(field):
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def rss_mb():
    """Current resident set in MiB (``VmRSS``); None where /proc is unavailable."""
    return _status_mb('VmRSS')


def peak_rss_mb():
    """The process's resident-set high-water mark in MiB (since start or the last reset)."""
    hwm = _status_mb('VmHWM')
    if hwm is not None:
        return hwm
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / 2 ** 20 if sys.platform == 'darwin' else usage / 1024  # bytes / KiB


def trim_heap():
    """Hand freed heap memory back to the system (glibc ``malloc_trim``; else no-op)."""
    libc_name = ctypes.util.find_library('c')
    try:
        ctypes.CDLL(libc_name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def reset_peak_rss():
    """Set the high-water mark back to the current resident set; False if not possible."""
    try:
        with open(_CLEAR_REFS, 'w') as f:
            f.write('5')
    except OSError:
        return False
    return True


@dataclass
class PeakRSS:
    """Filled in by :func:`peak_rss_growth`, MiB. ``growth_mb = peak_mb - baseline_mb``."""
    baseline_mb: float = 0.
    peak_mb: float = 0.
    growth_mb: float = 0.
    reset: bool = False  # whether the high-water mark was reset at the start


@contextlib.contextmanager
def peak_rss_growth():
    """``with peak_rss_growth() as mem: ...``; then ``mem.growth_mb`` is how many MiB
    the block pushed the resident set above its level at the start (its peak extra
    memory), ``mem.peak_mb`` the absolute peak during the block."""
    trim_heap()
    mem = PeakRSS(reset=reset_peak_rss())
    mem.baseline_mb = rss_mb() if mem.reset else peak_rss_mb()
    try:
        yield mem
    finally:
        mem.peak_mb = peak_rss_mb()
        mem.growth_mb = max(mem.peak_mb - mem.baseline_mb, 0.)


@dataclass
class PeakCUDA:
    """Filled in by :func:`peak_cuda_growth`, MiB of allocated tensors on one device.
    ``growth_mb = peak_mb - baseline_mb``."""
    baseline_mb: float = 0.
    peak_mb: float = 0.
    growth_mb: float = 0.


@contextlib.contextmanager
def peak_cuda_growth(device=None):
    """``with peak_cuda_growth(device) as mem: ...``; then ``mem.peak_mb`` is the most
    memory tensors held on ``device`` (a CUDA device; default the current one) during the
    block, and ``mem.growth_mb`` how far the block pushed it above its level at the start.
    The device is synchronised at both ends, so queued kernels count where they ran."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    mem = PeakCUDA(baseline_mb=torch.cuda.memory_allocated(device) / 2 ** 20)
    try:
        yield mem
    finally:
        torch.cuda.synchronize(device)
        mem.peak_mb = torch.cuda.max_memory_allocated(device) / 2 ** 20
        mem.growth_mb = max(mem.peak_mb - mem.baseline_mb, 0.)
