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
