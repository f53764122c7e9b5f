"""Mixed precision on CPU: bf16 autocast, no loss scaler (``tools/train.py --amp``).

mmengine's ``AmpOptimWrapper`` asserts a GPU (fp16 needs a loss scaler to keep
small gradients from underflowing). bfloat16 has float32's exponent range, so on
CPU autocasting the forward pass to bf16 needs no scaler at all: the optimizer
step, gradients and master weights stay float32.
"""
import contextlib

import torch
from mmengine.optim import OptimWrapper

from densevit.registry import OPTIM_WRAPPERS

_DTYPES = {'bfloat16': torch.bfloat16, 'bf16': torch.bfloat16, 'float16': torch.float16,
           'fp16': torch.float16}


@OPTIM_WRAPPERS.register_module()
class CPUAmpOptimWrapper(OptimWrapper):
    """``OptimWrapper`` whose forward pass runs under ``torch.autocast('cpu', dtype)``.

    Everything else (gradient accumulation, clipping, DDP ``no_sync``) is the
    plain ``OptimWrapper``'s.

    Args:
        dtype (str | torch.dtype): autocast dtype, 'bfloat16' (default) or 'float16'.
        **kwargs: as ``mmengine.optim.OptimWrapper`` (optimizer, accumulative_counts,
            clip_grad).
    """

    def __init__(self, dtype='bfloat16', **kwargs):
        super().__init__(**kwargs)
        self.cast_dtype = _DTYPES[dtype] if isinstance(dtype, str) else dtype

    @contextlib.contextmanager
    def optim_context(self, model):
        with super().optim_context(model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield


def amp_optim_wrapper(optim_wrapper_cfg, cuda=None):
    """``optim_wrapper`` config switched to mixed precision for this machine.

    GPU: mmengine's ``AmpOptimWrapper`` (fp16, dynamic loss scale unless the config
    gives one). CPU: :class:`CPUAmpOptimWrapper` (bf16, no ``loss_scale``).
    A ``SAMOptimWrapper`` config becomes ``SAMCPUAmpOptimWrapper`` on CPU; on GPU it is
    refused (fp16 SAM with a loss scaler is not implemented).
    """
    cfg = dict(optim_wrapper_cfg)
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if cfg.get('type') == 'SAMOptimWrapper':
        if cuda:
            raise ValueError('--amp with SAMOptimWrapper on GPU (fp16 with a loss scaler) is '
                             'not supported: train SAM in fp32 there, or use --amp on CPU '
                             '(bf16)')
        cfg['type'] = 'SAMCPUAmpOptimWrapper'
        cfg.pop('loss_scale', None)
    elif cuda:
        cfg['type'] = 'AmpOptimWrapper'
        cfg.setdefault('loss_scale', 'dynamic')
    else:
        cfg['type'] = 'CPUAmpOptimWrapper'
        cfg.pop('loss_scale', None)
    return cfg
