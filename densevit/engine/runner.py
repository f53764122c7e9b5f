"""mmengine's Runner with a start-up log a person can read.

mmengine's Runner opens every run with ~250 lines of resolved config, a 55-line
hook table, one line per parameter-wise optimizer option, a collect_env dump
(GPU and NCCL lines on a CPU machine) and deprecation warnings of its own
file client. Here the console gets three lines instead: what runs on what, the
seed and world size, and where the resolved config was written. The hook table
and the parameter-wise options still reach the log file in the work dir
(``<work_dir>/<timestamp>/<timestamp>.log``), for when they are needed; the
deprecation chatter goes nowhere.
"""
import logging
import os.path as osp

import torch
from mmengine.runner import Runner as MMEngineRunner

import densevit
from densevit.checkpoint.read import use_safe_checkpoint_loader

use_safe_checkpoint_loader()  # every path and URL mmengine loads: weights_only=True

# console only: still written to the log file
_FILE_ONLY = ('Hooks will be executed in the following order',
              'paramwise_options -- ')
# neither: mmengine talking about itself
_DROP = ('"FileClient" will be deprecated',
         '"HardDiskBackend" is the alias of',
         'The prefix is not set in metric class',
         'Distributed training is not used, all SyncBatchNorm')


class _Drop(logging.Filter):
    def __init__(self, prefixes):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record):
        message = str(record.msg)
        return not any(p in message[:200] for p in self.prefixes)


def quiet_logger(logger):
    """Attach densevit's filters to an MMLogger's handlers (idempotent)."""
    for handler in logger.handlers:
        if getattr(handler, '_densevit_quiet', False):
            continue
        is_file = isinstance(handler, logging.FileHandler)
        handler.addFilter(_Drop(_DROP if is_file else _DROP + _FILE_ONLY))
        handler._densevit_quiet = True
    return logger


def device_summary():
    """One phrase: the device a run uses, e.g. ``CPU, 2 threads`` or ``1 CUDA GPU (H100)``."""
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        return f'{n} CUDA GPU{"s" if n > 1 else ""} ({torch.cuda.get_device_name(0)})'
    n = torch.get_num_threads()
    return f'CPU, {n} thread{"s" if n > 1 else ""}'


class Runner(MMEngineRunner):
    """``mmengine.runner.Runner`` with the short start-up log described above."""

    def build_logger(self, *args, **kwargs):
        return quiet_logger(super().build_logger(*args, **kwargs))

    def register_hooks(self, default_hooks=None, custom_hooks=None):
        """mmengine's, plus, unless the config names them, a :class:`SkippedImagesHook` (a
        count of the images a ``skip_unreadable`` dataset skipped) and an
        :class:`RngStateHook` (torch's generator state saved and resumed; validation on a
        fork of it)."""
        custom_hooks = list(custom_hooks or [])
        for name in ('SkippedImagesHook', 'RngStateHook'):
            if not any(isinstance(h, dict) and h.get('type') == name for h in custom_hooks):
                custom_hooks.append(dict(type=name))
        super().register_hooks(default_hooks, custom_hooks)

    def _log_env(self, env_cfg):
        world = self._world_size
        self.logger.info(
            f'densevit {densevit.__version__}, torch {torch.__version__}, {device_summary()}; '
            f'{world} process{"es" if world > 1 else ""}'
            f'{f" ({self._launcher} launcher)" if self._distributed else ""}, seed {self._seed}')
        if self.cfg.filename is not None:
            name = osp.basename(self.cfg.filename)
        else:
            name = f'{self.timestamp}.py'
        # mmengine's dump_config writes it there at the end of __init__
        self.logger.info(f'resolved config: {osp.join(self.work_dir, name)}')

    def load_checkpoint(self, filename, map_location='cpu', strict=False,
                        revise_keys=((r'^module\.', ''),)):
        """mmengine's ``load_checkpoint``, with densevit's whole-model loading.

        A checkpoint in another layout (MMSegmentation, MMDetection, the official
        repositories, Hugging Face) is converted on load
        (:func:`densevit.checkpoint.model.load_model_weights`). ``test()`` and
        ``val()`` load strictly unless ``strict_load`` is set False (``tools/test.py
        --non-strict``): evaluating a model whose weights did not all load would
        report a number for a model nobody trained.
        """
        from mmengine.model import BaseTTAModel, is_model_wrapper
        from mmengine.runner.checkpoint import _load_checkpoint

        from densevit.checkpoint.model import load_model_weights
        from densevit.checkpoint.read import is_url, load_checkpoint_safely
        if '://' in str(filename) and not is_url(str(filename)):  # mmengine's other schemes
            checkpoint = _load_checkpoint(filename, map_location=map_location)
        else:  # read here: mmengine's loader prints an unformatted "Loads checkpoint by" line
            checkpoint = load_checkpoint_safely(filename, map_location)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        model = self.model.module if is_model_wrapper(self.model) else self.model
        if isinstance(model, BaseTTAModel):  # tools/test.py --tta: the weights are the module's
            model = model.module
        load_model_weights(model, checkpoint, str(filename),
                           strict=strict or self._evaluating and self.strict_load)
        self._has_loaded = True
        return checkpoint

    def train(self):
        """mmengine's ``train``; a ``FloatingPointError`` from inside the model (a
        detector's matcher meeting NaN predictions) names the iteration. Distributed, a
        peer that died or hangs raises ``PeerFailureError`` (``engine/dist_faults.py``)."""
        import signal

        from densevit.engine.dist_faults import explain_peer_failure, note_sigterm
        from densevit.engine.nonfinite_loss_hook import NonFiniteLossError
        previous = note_sigterm(self.work_dir) if self._distributed else None
        try:
            return super().train()
        except NonFiniteLossError:
            raise
        except FloatingPointError as e:
            raise NonFiniteLossError(f'Training stopped at iteration {self.iter + 1} (epoch '
                                     f'{self.epoch + 1}): {e}') from e
        except RuntimeError as e:
            timeout = (self.cfg.get('env_cfg') or {}).get('dist_cfg', {}).get('timeout')
            failure = explain_peer_failure(e, self.iter + 1, self.work_dir, timeout)
            if failure is None:
                raise
            raise failure from e
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    strict_load = True  # for test() / val(); training's load_from reports instead
    _evaluating = False

    def test(self):
        self._evaluating = True
        return super().test()

    def val(self):
        self._evaluating = True
        return super().val()

    def resume(self, filename, resume_optimizer=True, resume_param_scheduler=True,
               map_location='default'):
        """mmengine's ``resume``, after checking strictly that the checkpoint continues this
        run: the same tensors and shapes, the same optimizer groups
        (``engine/resume_check.py``); a changed model is refused before anything loads."""
        from densevit.checkpoint.read import load_checkpoint_safely
        from densevit.engine.resume_check import check_resume
        check_resume(self, load_checkpoint_safely(filename, mmap=True), filename,
                     resume_optimizer)
        return super().resume(filename, resume_optimizer, resume_param_scheduler, map_location)

    def load_or_resume(self):
        """mmengine's, but ``--resume`` without a path falls back to the newest intact
        checkpoint when the latest is truncated (warning naming both), and says once
        that it starts from scratch when the work dir has none."""
        if self._has_loaded or not (self._resume and self._load_from is None):
            return super().load_or_resume()
        chosen = newest_intact_checkpoint(self.work_dir, self.logger)
        if chosen is None:
            self.logger.info(f'--resume: no checkpoint in {self.work_dir}; starting from '
                             f'scratch')
        else:
            self.logger.info(f'resuming from {chosen}')
            self.resume(chosen)
        self._has_loaded = True


def newest_intact_checkpoint(work_dir, logger):
    """The checkpoint ``--resume`` continues from: the one ``last_checkpoint`` names or,
    when that is truncated or gone, the newest ``iter_*.pth`` / ``epoch_*.pth`` that
    loads (with a WARNING naming both). None when the work dir has none."""
    import glob
    import re

    from densevit.checkpoint.read import CorruptCheckpointError, load_checkpoint_safely
    from densevit.engine.checkpoint_hook import read_last_checkpoint
    latest = read_last_checkpoint(work_dir)

    def step(path):
        m = re.search(r'(\d+)\.pth$', path)
        return int(m[1]) if m else -1
    saved = sorted(glob.glob(osp.join(work_dir, '*_[0-9]*.pth')), key=step, reverse=True)
    candidates = list(dict.fromkeys(([latest] if latest else []) + saved))
    broken = []
    for path in candidates:
        try:  # mapped, not read: resume() reads the chosen one
            load_checkpoint_safely(path, mmap=True)
        except (CorruptCheckpointError, FileNotFoundError) as e:
            broken.append(path)
            logger.warning(f'--resume: skipping {path}: {e}')
            continue
        if broken:
            logger.warning(f'--resume: the latest checkpoint {broken[0]} is unreadable; '
                           f'resuming from {path}, the newest intact one')
        return path
    if broken:
        raise CorruptCheckpointError(f'--resume: every checkpoint in {work_dir} is unreadable: '
                                     f'{broken}')
    return None
