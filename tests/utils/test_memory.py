"""densevit.utils.memory.peak_rss_growth: a known allocation is measured, and an
earlier, larger peak (as building a model leaves) does not hide it."""
import pytest
import torch

from densevit.utils.memory import peak_rss_growth, reset_peak_rss


def fill(mib):
    return torch.ones(mib * 2 ** 20 // 4)  # written, so every page is resident


@pytest.mark.skipif(not reset_peak_rss(), reason='needs /proc/self/clear_refs (Linux)')
def test_peak_rss_growth_measures_a_known_allocation_after_a_larger_peak():
    big = fill(256)
    del big  # the process's high-water mark is now >= 256 MiB above the current level
    with peak_rss_growth() as mem:
        block = fill(64)
        del block  # freed inside the block: the peak still counts it
    assert mem.reset
    assert 60 <= mem.growth_mb <= 72
    assert mem.peak_mb == pytest.approx(mem.baseline_mb + mem.growth_mb)

    with peak_rss_growth() as mem:
        pass
    assert mem.growth_mb < 8


class _FakeAllocator:
    """CUDA's allocator counters as torch.cuda reports them, driven by hand: the test
    allocates and frees MiB and knows the answer."""

    def __init__(self, held_mib, earlier_peak_mib):
        self.held, self.peak, self.calls = held_mib, earlier_peak_mib, []

    def alloc(self, mib):
        self.held += mib
        self.peak = max(self.peak, self.held)

    def patch(self, monkeypatch):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, 'synchronize', lambda device=None: self.calls.append('sync'))
        monkeypatch.setattr(cuda, 'reset_peak_memory_stats', self._reset)
        monkeypatch.setattr(cuda, 'memory_allocated', lambda device=None: self.held * 2 ** 20)
        monkeypatch.setattr(cuda, 'max_memory_allocated', lambda device=None: self.peak * 2 ** 20)

    def _reset(self, device=None):
        self.calls.append('reset')
        self.peak = self.held


def test_peak_cuda_growth_reads_the_allocator_from_a_reset_peak(monkeypatch):
    from densevit.utils.memory import peak_cuda_growth
    fake = _FakeAllocator(held_mib=100, earlier_peak_mib=900)  # an earlier, larger peak
    fake.patch(monkeypatch)
    with peak_cuda_growth('cuda:0') as mem:
        fake.alloc(300)  # activations
        fake.alloc(-250)  # freed inside the block: the peak still counts them
        fake.alloc(20)
    # by hand: 100 held at the start, 400 at the most, 170 at the end
    assert (mem.baseline_mb, mem.peak_mb, mem.growth_mb) == (100, 400, 300)
    assert fake.calls == ['sync', 'reset', 'sync']  # queued kernels counted where they ran

    with peak_cuda_growth() as mem:
        fake.alloc(-50)  # a block that only frees grows nothing
    assert (mem.baseline_mb, mem.peak_mb, mem.growth_mb) == (170, 170, 0)
