"""One log line per epoch counting the images a ``skip_unreadable`` dataset skipped."""
from mmengine.hooks import Hook
from mmengine.runner import IterBasedTrainLoop

from densevit.datasets.unreadable import SKIPPED_KEY
from densevit.registry import HOOKS

SHOW_FIRST = 5  # files named in the per-epoch line


@HOOKS.register_module()
class SkippedImagesHook(Hook):
    """Count the images skipped in training (see :mod:`densevit.datasets.unreadable`).

    The first skip of a run is logged when it happens (a WARNING naming the file);
    after that, one WARNING per epoch (iteration-based loops: at the end of training)
    gives the count and names the first few distinct files. Counts are those of this
    process's data (rank 0's in a distributed run's log). densevit's Runner adds the
    hook to every run; it does nothing when no image is skipped.
    """

    priority = 'LOW'

    def __init__(self):
        self._lines = []
        self._warned = False

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        samples = (data_batch or {}).get('data_samples') if isinstance(data_batch, dict) else None
        for sample in samples or ():
            lines = getattr(sample, 'metainfo', {}).get(SKIPPED_KEY)
            if not lines:
                continue
            if not self._warned:
                self._warned = True
                runner.logger.warning(f'skip_unreadable: skipping an unreadable image: '
                                      f'{lines[0]}; a count follows at the end of the epoch')
            self._lines.extend(lines)

    def after_train_epoch(self, runner):
        if not self._lines:
            return
        files = list(dict.fromkeys(self._lines))
        by_iter = isinstance(runner.train_loop, IterBasedTrainLoop)
        where = 'in training' if by_iter else f'in epoch {runner.epoch + 1}'
        more = f' and {len(files) - SHOW_FIRST} more' if len(files) > SHOW_FIRST else ''
        runner.logger.warning(
            f'skip_unreadable: {len(self._lines)} unreadable images skipped {where} '
            f'({len(files)} files), each replaced by another image: '
            + '; '.join(files[:SHOW_FIRST]) + more
            + '. List every problem with tools/dataset/check.py CONFIG')
        self._lines = []
