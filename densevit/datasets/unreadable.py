"""``skip_unreadable``: training goes on past images that are missing or cannot be decoded.

A dataset with ``skip_unreadable=True`` (CocoDataset, SegFolderDataset,
UnlabelledImageDataset and their subclasses) catches the :data:`~densevit.datasets.transforms.loading.IMAGE_ERRORS`
that ``LoadImage`` raises while training and draws another image instead, as
mmengine's ``BaseDataset`` does when a pipeline returns None (at most
``max_refetch`` times in a row). Each skip travels with the replacement sample
(``DataSample.metainfo['skipped_images']``) out of the DataLoader worker, so
:class:`~densevit.engine.skipped_images_hook.SkippedImagesHook` (added to every
densevit Runner) can log one count per epoch in the main process, whatever the
number of workers.

Evaluation never skips: in ``test_mode`` an unreadable image stays an error, because
a score on a silently smaller set is not comparable with anybody's.
"""
from densevit.datasets.transforms.loading import IMAGE_ERRORS, image_error_line

SKIPPED_KEY = 'skipped_images'  # metainfo key: the lines of the images skipped before it


class SkipUnreadableMixin:
    """Put before ``BaseDataset`` in the bases; adds the ``skip_unreadable`` argument.

    Args:
        skip_unreadable (bool): in training, replace an image ``LoadImage`` cannot read
            (missing file or undecodable bytes) by another one, and count it. Default
            False: the first such image stops training with an error naming it.
    """

    def __init__(self, *args, skip_unreadable=False, **kwargs):
        self.skip_unreadable = skip_unreadable
        self._skipped = []  # lines of images skipped since the last sample returned
        super().__init__(*args, **kwargs)

    def prepare_data(self, idx):
        if not self.skip_unreadable or self.test_mode:
            return super().prepare_data(idx)
        try:
            return super().prepare_data(idx)
        except IMAGE_ERRORS as e:
            self._skipped.append(image_error_line(e))
            return None  # BaseDataset.__getitem__ draws another index

    def __getitem__(self, idx):
        try:
            data = super().__getitem__(idx)
        except Exception as e:  # mmengine raises a bare Exception after max_refetch misses
            if not (self._skipped and type(e) is Exception):
                raise
            lines, self._skipped = self._skipped, []
            raise IMAGE_ERRORS[0](
                f'skip_unreadable: {len(lines)} images in a row could not be read '
                f'(max_refetch={self.max_refetch}); the last: {lines[-1]}') from None
        if self._skipped:
            samples = data.get('data_samples') if isinstance(data, dict) else None
            if samples is not None and hasattr(samples, 'set_metainfo'):
                samples.set_metainfo({SKIPPED_KEY: tuple(self._skipped)})
            self._skipped = []
        return data
