"""Training's random numbers in the checkpoint, so that ``--resume`` continues them.

While it trains, a model draws from torch's global generator: dropout and drop path, MAE's
masks, DINO's denoising noise, EoMT's masking draws, the points the mask losses sample.
mmengine's resume seeds that generator afresh and replays the data loader, which brings the
data back (the pipelines draw from numpy, in the loader's workers or in the replay) but starts
the model's draws again from the seed, so a resumed run drifts from an uninterrupted one.
"""
import random

import numpy as np
import torch
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.runner import EpochBasedTrainLoop

from densevit.registry import HOOKS

#: where a checkpoint keeps the generator's state
RNG_KEY = 'torch_rng_state'


def rng_state():
    """The generators' states: torch's ``'cpu'`` (ByteTensor) and ``'cuda'`` (one per device,
    once CUDA is in use), numpy's (``'numpy'``, its key as an int64 tensor, so that
    ``torch.load(weights_only=True)`` reads it) and Python's (``'python'``)."""
    name, key, pos, has_gauss, gauss = np.random.get_state()
    state = {'cpu': torch.get_rng_state(),
             'numpy': (name, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss),
                       float(gauss)),
             'python': random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state, host=False):
    """Set torch's generators from what :func:`rng_state` returned (CUDA's where the devices
    are the same number); with ``host``, numpy's and Python's too."""
    torch.set_rng_state(state['cpu'])
    cuda = state.get('cuda')
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    if host and 'numpy' in state:
        name, key, pos, has_gauss, gauss = state['numpy']
        np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
        random.setstate(state['python'])


@HOOKS.register_module()
class RngStateHook(Hook):
    """Keep the generators' state (torch's; numpy's and Python's beside it) in each checkpoint
    (``checkpoint['torch_rng_state']``, the key named for what every resume restores) and
    set it back at the first iteration of a run resumed from that checkpoint, so the resumed
    run draws what the uninterrupted one drew.

    Validation runs on a fork of the state: what it draws (each data-loader iterator takes a
    worker seed from the generator) is undone after it. So the state saved just before a
    validation is the one the next iteration starts from, and how often a run validates does
    not change its training.

    A checkpoint loaded with ``load_from`` (a fine-tune, starting at iteration 0) leaves the
    generator alone, and so does a checkpoint saved before this hook existed. With several
    processes each has its own stream and a checkpoint is written by one of them, so a
    distributed run saves no state and resumes as mmengine does (logged).

    Where it is set back: an iteration-based run, torch's generator at its first iteration,
    after mmengine has replayed the data loader up to it (the replay redoes the pipelines'
    numpy draws); an epoch-based run, which is not replayed, every generator (numpy and Python
    too: a pipeline in the main process draws from them) when the epoch starts, before that
    epoch's data loader takes its worker seed (as the uninterrupted run's did after the save).

    Registered by densevit's ``Runner`` in every run; ``VERY_HIGH`` priority, so it restores
    before any other hook draws or saves.
    """

    priority = 'VERY_HIGH'

    def __init__(self):
        self._resumed = None  # (iteration, state) of the checkpoint loaded
        self._before_val = None

    def before_save_checkpoint(self, runner, checkpoint):
        if get_world_size() == 1:
            checkpoint[RNG_KEY] = rng_state()

    def after_load_checkpoint(self, runner, checkpoint):
        state, meta = checkpoint.get(RNG_KEY), checkpoint.get('meta') or {}
        self._resumed = (meta['iter'], state) if state is not None and 'iter' in meta else None

    def before_train_epoch(self, runner):
        if isinstance(runner.train_loop, EpochBasedTrainLoop):
            self._restore(runner, host=True)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self._restore(runner)

    def _restore(self, runner, host=False):
        if self._resumed is None:
            return
        (it, state), self._resumed = self._resumed, None
        if runner.iter != it or it == 0:  # not a resume of that checkpoint
            return
        if get_world_size() > 1:
            runner.logger.info('RngStateHook: a distributed run resumes with freshly seeded '
                               'generators (each process has its own stream)')
            return
        set_rng_state(state, host=host)

    def before_val_epoch(self, runner):
        self._before_val = rng_state()

    def after_val_epoch(self, runner, metrics=None):
        if self._before_val is not None:
            set_rng_state(self._before_val, host=True)
            self._before_val = None
