"""Checkpoints that are never half-written: mmengine's CheckpointHook with atomic saves.

mmengine writes ``iter_N.pth`` in place, then overwrites ``last_checkpoint`` in
place, and deletes the oldest kept checkpoint *before* saving the new one. A
process killed in between (out of memory, preempted job, Ctrl-C) can leave a
truncated ``iter_N.pth`` or an empty ``last_checkpoint``; with
``max_keep_ckpts=1`` it can leave no loadable checkpoint at all, and
``--resume`` then fails or silently starts over.

Here every file is written to a temporary name in the same folder, flushed to
disk and renamed over the final name (``os.replace`` is atomic on POSIX and
Windows), ``last_checkpoint`` is updated only after the checkpoint is complete,
and old checkpoints are deleted only after that. At any instant
``last_checkpoint`` names a complete file.

Registered as ``AtomicCheckpointHook`` and, in scope ``densevit``, also as
``CheckpointHook``: every densevit config that names ``type='CheckpointHook'``
gets the atomic saves. Non-local ``out_dir`` (``s3://`` ...) falls back to
mmengine's behaviour.

Loading goes the safe way too: importing this module (the registry does when a
runner in scope ``densevit`` builds its hooks, before it loads ``load_from`` or
resumes) routes mmengine's local checkpoint reads through
:func:`densevit.checkpoint.read.load_checkpoint_safely` (``weights_only=True``, clear
errors for files holding pickled code or cut short).
"""
import contextlib
import glob
import os
import os.path as osp
import shutil

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook as MMEngineCheckpointHook

from densevit.checkpoint.read import use_safe_checkpoint_loader
from densevit.registry import HOOKS

use_safe_checkpoint_loader()

_TMP_SUFFIX = '.tmp'


class CheckpointSaveError(OSError):
    """A checkpoint could not be written (e.g. the disk is full); the message names the
    file and the free space, and no temporary file is left behind."""


@contextlib.contextmanager
def _cleaned_on_error(path, previous=None):
    """Remove ``path + .tmp`` and raise :class:`CheckpointSaveError` if the block fails."""
    tmp = path + _TMP_SUFFIX
    try:
        yield tmp
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        folder = osp.dirname(osp.abspath(path))
        try:
            free = f'{shutil.disk_usage(folder).free / 2**20:.1f} MiB free in {folder}'
        except OSError:
            free = f'free space of {folder} unknown'
        kept = f'; {previous} is intact' if previous and osp.isfile(previous) else ''
        raise CheckpointSaveError(e.errno, f'could not write {path}: {e.strerror or e} '
                                  f'({free}){kept}') from None


def atomic_write_text(path, text):
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with _cleaned_on_error(path) as tmp:
        with open(tmp, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def _fsync(path):
    with open(path, 'rb') as f:
        os.fsync(f.fileno())


def read_last_checkpoint(work_dir):
    """The checkpoint ``<work_dir>/last_checkpoint`` names, as a path, or None.

    The file holds a path relative to the work dir. Files written before that held an
    absolute path: when the work dir was copied or moved, the path points into the
    original folder, so a file of the same name in this work dir is preferred.
    """
    try:
        with open(osp.join(work_dir, 'last_checkpoint')) as f:
            named = f.read().strip()
    except OSError:
        return None
    if not named:
        return None
    if not osp.isabs(named):
        return osp.join(work_dir, named)
    own = osp.join(work_dir, osp.basename(named))
    if osp.abspath(osp.dirname(named)) != osp.abspath(work_dir) and osp.isfile(own):
        return own
    return named


@HOOKS.register_module(name=['AtomicCheckpointHook', 'CheckpointHook'])
class AtomicCheckpointHook(MMEngineCheckpointHook):
    """``mmengine.hooks.CheckpointHook`` (same arguments) whose saves are atomic.

    Order of a save: write ``<name>.tmp`` -> fsync -> rename to ``<name>`` ->
    rewrite ``last_checkpoint`` the same way -> delete checkpoints beyond
    ``max_keep_ckpts``. Temporary files left by a killed save are removed when
    training starts. Best checkpoints (``save_best``) keep mmengine's own writer:
    ``last_checkpoint`` never names them.
    """

    def _is_local(self):
        return isinstance(self.file_backend, LocalBackend)

    def before_train(self, runner):
        super().before_train(runner)
        if self._is_local() and is_main_process():
            for stale in glob.glob(osp.join(self.out_dir, f'*{_TMP_SUFFIX}')):
                os.remove(stale)

    def _save_checkpoint_with_step(self, runner, step, meta, name=None):
        if not self._is_local():
            return super()._save_checkpoint_with_step(runner, step, meta)
        tracked = name is None  # an extra save (save_now mid-epoch) is not among the kept
        name = name or self.filename_tmpl.format(step)
        path = osp.join(self.out_dir, name)
        previous = self.last_ckpt
        self.last_ckpt = path
        runner.message_hub.update_info('last_ckpt', path)
        stale = self._track(runner, step) if tracked else []
        with _cleaned_on_error(path, previous) as tmp:
            # Runner.save_checkpoint writes on the main process only
            runner.save_checkpoint(self.out_dir, osp.basename(tmp), self.file_client_args,
                                   save_optimizer=self.save_optimizer,
                                   save_param_scheduler=self.save_param_scheduler, meta=meta,
                                   by_epoch=self.by_epoch, backend_args=self.backend_args,
                                   **self.args)
            if not is_main_process():
                return
            _fsync(tmp)
            os.replace(tmp, path)
        # relative to the work dir: a copied or moved work dir resumes from its own files
        atomic_write_text(osp.join(runner.work_dir, 'last_checkpoint'),
                          osp.relpath(path, runner.work_dir))
        for old in stale:
            old_path = osp.join(self.out_dir, self.filename_tmpl.format(old))
            if osp.isfile(old_path) and old_path != path:
                os.remove(old_path)

    def save_now(self, runner, step):
        """Save iteration ``step`` unless the last save was of it; returns the file.

        For hooks that stop training between the scheduled saves (the training clock,
        an interrupt): atomic, updates ``last_checkpoint`` and keeps ``max_keep_ckpts``.
        An epoch-based run stopped mid-epoch saves ``iter_<step>.pth`` (not among the
        kept ``epoch_*`` files); resumed, it repeats that epoch from its start.
        """
        name = f'iter_{step}.pth' if self.by_epoch else self.filename_tmpl.format(step)
        if self.last_ckpt is None or osp.basename(self.last_ckpt) != name:
            self._save_checkpoint_with_step(runner, step, dict(epoch=runner.epoch, iter=step),
                                            name=name if self.by_epoch else None)
        return self.last_ckpt

    def _track(self, runner, step):
        """Record ``step`` among the kept checkpoints; return the steps to delete."""
        if self.max_keep_ckpts <= 0 or (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            return []
        stale = []
        while len(self.keep_ckpt_ids) >= self.max_keep_ckpts:  # a deque with maxlen
            stale.append(self.keep_ckpt_ids.popleft())
        self.keep_ckpt_ids.append(step)
        # saved in the checkpoint's message hub: a resumed run deletes the same files
        runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        return stale
