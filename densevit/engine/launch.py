"""What mmengine's launcher needs on a machine without CUDA.

``launcher='pytorch'`` makes mmengine call ``torch.cuda.set_device`` and wrap the
model in DDP with ``device_ids=[LOCAL_RANK]``; both fail on a CPU build. Starting the
process group with gloo first (mmengine then skips its own init) and wrapping with
``CPUDistributedDataParallel`` (``device_ids=None``, SyncBN layers synchronised over
gloo) runs the same code on CPU processes. With GPUs mmengine initialises NCCL itself.

A collective waits at most ``DENSEVIT_DIST_TIMEOUT`` / ``env_cfg.dist_cfg.timeout``
seconds (default 2 minutes with gloo) for the other ranks; see ``dist_faults.py``.
"""
import datetime
import os

import torch
import torch.distributed as dist

import densevit.registry  # noqa: F401  (the 'densevit' scope the wrapper type names)
from densevit.engine.dist_faults import GLOO_TIMEOUT_S, collective_timeout


def setup_launcher(cfg, launcher):
    """Set ``cfg.launcher`` and, on CPU, initialise gloo and a CPU-friendly DDP wrapper."""
    cfg.launcher = launcher
    if not torch.cuda.is_available() and cfg.get('env_cfg', {}).get('dist_cfg'):
        cfg.env_cfg.dist_cfg.backend = 'gloo'  # NCCL needs CUDA
    if launcher == 'none':
        return cfg
    timeout = collective_timeout(cfg, default=None if torch.cuda.is_available() else GLOO_TIMEOUT_S)
    if timeout is not None:  # mmengine passes dist_cfg to init_process_group (NCCL) in seconds
        cfg.env_cfg = dict(cfg.get('env_cfg') or {})
        cfg.env_cfg['dist_cfg'] = dict(cfg.env_cfg.get('dist_cfg') or {}, timeout=timeout)
    if launcher == 'slurm' and 'RANK' not in os.environ:
        # srun gives SLURM_* variables; torch.distributed reads RANK / WORLD_SIZE / MASTER_*
        os.environ.setdefault('RANK', os.environ.get('SLURM_PROCID', '0'))
        os.environ.setdefault('WORLD_SIZE', os.environ.get('SLURM_NTASKS', '1'))
        os.environ.setdefault('LOCAL_RANK', os.environ.get('SLURM_LOCALID', '0'))
        os.environ.setdefault('MASTER_PORT', os.environ.get('PORT', '29500'))
        if 'MASTER_ADDR' not in os.environ and 'SLURM_NODELIST' in os.environ:
            os.environ['MASTER_ADDR'] = _first_slurm_host(os.environ['SLURM_NODELIST'])
    if torch.cuda.is_available():
        return cfg
    if not dist.is_initialized():
        os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
        dist.init_process_group(backend='gloo', timeout=datetime.timedelta(seconds=timeout))
    wrapper = dict(cfg.get('model_wrapper_cfg') or {})
    if wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        # densevit/engine/sync_bn.py. Scoped name: Runner.wrap_model looks the type up with
        # MODEL_WRAPPERS.get on mmengine's root registry, which ignores the default scope.
        wrapper['type'] = 'densevit.CPUDistributedDataParallel'
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    return cfg


def shutdown_distributed():
    """Wait for every process, then close the process group.

    Left open, gloo's threads are torn down while the interpreter exits, and a
    process can abort ("terminate called without an active exception") after its
    work is done, which torchrun reports as a failed run.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_process(code):
    """End a tool's process with ``code``.

    After a failure a distributed run's process group is still open, and may have a
    collective pending on a peer that hangs; tearing gloo down then aborts the process
    ("terminate called without an active exception", killed by SIGABRT) and the exit
    code is lost. In that case the streams are flushed and the process leaves without
    running destructors; otherwise this is ``sys.exit(code)``.
    """
    import sys
    if dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _first_slurm_host(nodelist):
    """The first host of a SLURM node list (``scontrol`` expands ``node[1-4]``)."""
    import subprocess
    try:
        out = subprocess.run(['scontrol', 'show', 'hostnames', nodelist], capture_output=True,
                             text=True, check=True).stdout.split()
        return out[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return nodelist.split(',')[0].split('[')[0]
