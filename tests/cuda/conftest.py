"""tests/cuda: the same computation on CPU and on a CUDA GPU must agree.

Without a GPU the CUDA cases skip ('needs a CUDA GPU'); with
``DENSEVIT_TEST_DEVICE=cuda`` (tools/dev/gpu_check.sh) they fail instead.
The cases marked ``cpu64-cpu32`` / ``cpu-autocast`` run the same helpers on CPU.
"""
import pytest
import torch

from device_compare import WANT_CUDA


@pytest.fixture(autouse=True)
def exact_fp32_on_cuda():
    """fp32 matmuls and convolutions in full fp32 (TF32 would differ from CPU by ~1e-3)."""
    if WANT_CUDA and not torch.cuda.is_available():
        pytest.fail(f'DENSEVIT_TEST_DEVICE=cuda but torch.cuda.is_available() is False '
                    f'(torch {torch.__version__}, built for CUDA {torch.version.cuda})')
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
