"""SyncBN that runs everywhere: synchronised on GPUs and on CPU processes, plain BN alone.

``norm_cfg=dict(type='SyncBN')`` builds ``torch.nn.SyncBatchNorm``. Its two failure
modes are the ones users meet:

- one process: torch >= 2.x falls back to plain BN when no process group exists,
  and mmengine's Runner reverts SyncBN to BN before training; code that builds a
  model without the Runner (``densevit.apis.init_model``) calls
  :func:`revert_sync_bn_if_single` for the same result.
- several CPU processes (gloo): torch refuses CPU input ("SyncBatchNorm expected
  input tensor to be on GPU"). :class:`CPUSyncBatchNorm` computes the batch
  statistics over all processes with a differentiable all-reduce of
  (sum, sum of squares, count), so gradients flow through the global mean and
  variance as in torch's CUDA kernel. :class:`CPUDistributedDataParallel`
  converts the model's SyncBN layers to it before wrapping (``launch.py`` selects
  this wrapper on machines without CUDA).
"""
import torch
import torch.distributed as dist
from mmengine.dist import get_world_size
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from densevit.registry import MODEL_WRAPPERS


def _all_reduce_sum(tensor):
    """Differentiable sum over processes (the backward pass sums the gradients too)."""
    from torch.distributed.nn.functional import all_reduce
    return all_reduce(tensor, op=dist.ReduceOp.SUM)


class CPUSyncBatchNorm(_BatchNorm):
    """Batch normalisation with statistics over all processes, for CPU tensors (gloo).

    Same parameters, buffers and state-dict keys as ``nn.SyncBatchNorm`` (it is made
    from one by :func:`convert_sync_bn_for_cpu`). Not a subclass of it: torch's DDP
    refuses CPU modules that contain ``nn.SyncBatchNorm``. In evaluation, or in a
    single process, it is plain batch normalisation.
    """

    process_group = None

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {x.dim()}D input)')

    def _needs_cpu_sync(self, x):
        return (self.training and x.device.type == 'cpu' and dist.is_available()
                and dist.is_initialized()
                and dist.get_world_size(self.process_group or dist.group.WORLD) > 1)

    def forward(self, x):
        if not self._needs_cpu_sync(x):
            return super().forward(x)
        self._check_input_dim(x)
        dims = [0] + list(range(2, x.dim()))  # all but channels
        count = x.new_tensor([x.numel() / x.shape[1]], dtype=torch.float32)
        stats = torch.cat([x.float().sum(dims), (x.float() ** 2).sum(dims), count])
        stats = _all_reduce_sum(stats)
        c = x.shape[1]
        total, n = stats[:c], stats[-1]
        mean = total / n
        var = (stats[c:2 * c] / n - mean ** 2).clamp(min=0)  # biased, as BN normalises
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), n.item())
        shape = [1, c] + [1] * (x.dim() - 2)
        inv_std = torch.rsqrt(var.view(shape) + self.eps)
        out = (x - mean.view(shape).to(x.dtype)) * inv_std.to(x.dtype)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean, var, n):
        self.num_batches_tracked.add_(1)
        momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                    else self.momentum)
        unbiased = var * n / max(n - 1, 1)
        self.running_mean.mul_(1 - momentum).add_(momentum * mean)
        self.running_var.mul_(1 - momentum).add_(momentum * unbiased)


def convert_sync_bn_for_cpu(module):
    """Make every ``nn.SyncBatchNorm`` (or subclass: mmcv builds mmengine's) in ``module`` a
    :class:`CPUSyncBatchNorm`, in place.

    Only the class changes (the same parameters and buffers), so weights and
    checkpoints are untouched. Returns the number of layers converted.
    """
    converted = 0
    for m in module.modules():
        if isinstance(m, nn.SyncBatchNorm):
            m.__class__ = CPUSyncBatchNorm
            converted += 1
    return converted


def revert_sync_bn_if_single(model):
    """SyncBN -> BatchNorm*d when not distributed (world size 1); the model otherwise."""
    if get_world_size() > 1:
        return model
    return revert_sync_batchnorm(model)


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for CPU processes: no ``device_ids``, SyncBN via gloo.

    Args:
        module (nn.Module): the model (on CPU).
        **kwargs: as ``torch.nn.parallel.DistributedDataParallel``; ``device_ids``
            is forced to None (CPU modules take none).
    """

    def __init__(self, module, **kwargs):
        kwargs['device_ids'] = None
        if not any(p.is_cuda for p in module.parameters()):
            convert_sync_bn_for_cpu(module)
        super().__init__(module=module, **kwargs)


__all__ = ['CPUSyncBatchNorm', 'CPUDistributedDataParallel', 'convert_sync_bn_for_cpu',
           'revert_sync_bn_if_single']
