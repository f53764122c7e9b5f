"""One torch thread for the tiny self-supervised models."""
import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one torch thread is faster on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
