"""Draw ground-truth and predicted class maps of a ``DataSample`` over the image (gt | pred)."""
import numpy as np

from densevit.registry import VISUALIZERS
from densevit.visualization.enlarge import MIN_SIDE, fit_map
from densevit.visualization.sample_drawing import SampleVisualizer, to_numpy


@VISUALIZERS.register_module()
class SegLocalVisualizer(SampleVisualizer):
    """mmengine ``Visualizer`` that blends class maps over images in the dataset palette
    (panoptic segments and instance masks when the predictions hold them:
    :class:`~densevit.visualization.sample_drawing.SampleVisualizer`).

    Args:
        name, image, vis_backends, save_dir: see ``mmengine.visualization.Visualizer``.
        alpha (float): opacity of the class colours (0: image only, 1: colours only).
        ignore_index (int): label value left undrawn (the image shows through).
        min_side (int): images whose shorter side is below it are drawn enlarged (0: never).

    Colours come from ``dataset_meta['palette']`` (RGB), extended with distinct
    colours when a label has none.
    """

    def __init__(self, name='visualizer', image=None, vis_backends=None, save_dir=None,
                 alpha=0.5, ignore_index=255, min_side=MIN_SIDE):
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir,
                         fill_alpha=alpha, min_side=min_side)
        self.alpha = alpha
        self.ignore_index = ignore_index

    def draw_sem_seg(self, image, sem_seg):
        """Blend ``sem_seg`` ([1, H, W] or [H, W] labels, PixelData or tensor) over ``image``.

        Args:
            image (np.ndarray): HWC RGB uint8. A map of another size is resized to it
                (nearest), e.g. a label kept at the size of a resized image, or the
                original-size map of an enlarged image.

        Returns:
            np.ndarray: the drawn HWC RGB uint8 image.
        """
        labels = to_numpy(getattr(sem_seg, 'data', sem_seg))
        labels = fit_map(labels.reshape(labels.shape[-2:]).astype(np.int64), image.shape[:2])
        valid = (labels != self.ignore_index) & (labels >= 0)
        palette = np.array(self._class_info(int(labels[valid].max(initial=0)))[1], np.float32)
        drawn = image.astype(np.float32)
        colours = palette[labels[valid]]
        drawn[valid] = (1 - self.alpha) * drawn[valid] + self.alpha * colours
        drawn = drawn.round().clip(0, 255).astype(np.uint8)
        self.set_image(drawn)
        return drawn

    def draw_plain(self, image, data_sample, prefix, score_thr, scale):
        """``<prefix>_sem_seg`` as a class map, or None when the sample has none."""
        if f'{prefix}_sem_seg' not in data_sample:
            return None
        return self.draw_sem_seg(image, data_sample.get(f'{prefix}_sem_seg'))
