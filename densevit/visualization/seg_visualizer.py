"""Draw ground-truth and predicted class maps of a ``DataSample`` over the image (gt | pred)."""
import cv2
import mmcv
import numpy as np
from mmengine.dist import master_only
from mmengine.visualization import Visualizer

from densevit.registry import VISUALIZERS
from densevit.visualization.det_visualizer import class_palette, to_numpy


@VISUALIZERS.register_module()
class SegLocalVisualizer(Visualizer):
    """mmengine ``Visualizer`` that blends class maps over images in the dataset palette.

    Args:
        name, image, vis_backends, save_dir: see ``mmengine.visualization.Visualizer``.
        alpha (float): opacity of the class colours (0: image only, 1: colours only).
        ignore_index (int): label value left undrawn (the image shows through).

    Colours come from ``dataset_meta['palette']`` (RGB), extended with distinct
    colours when a label has none.
    """

    def __init__(self, name='visualizer', image=None, vis_backends=None, save_dir=None,
                 alpha=0.5, ignore_index=255):
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir)
        self.alpha = alpha
        self.ignore_index = ignore_index

    def _palette(self, max_label):
        meta = self.dataset_meta or {}
        num = max(len(meta.get('classes', ()) or ()), max_label + 1)
        palette = [tuple(c) for c in (meta.get('palette') or ())]
        return np.array(palette + class_palette(num)[len(palette):], np.float32).reshape(-1, 3)

    def draw_sem_seg(self, image, sem_seg):
        """Blend ``sem_seg`` ([1, H, W] or [H, W] labels, PixelData or tensor) over ``image``.

        Args:
            image (np.ndarray): HWC RGB uint8. A map of another size is resized to it
                (nearest), e.g. a label kept at the size of a resized image.

        Returns:
            np.ndarray: the drawn HWC RGB uint8 image.
        """
        labels = to_numpy(getattr(sem_seg, 'data', sem_seg))
        labels = labels.reshape(labels.shape[-2:]).astype(np.int64)
        h, w = image.shape[:2]
        if labels.shape != (h, w):
            labels = cv2.resize(labels.astype(np.int32), (w, h), interpolation=cv2.INTER_NEAREST)
        valid = (labels != self.ignore_index) & (labels >= 0)
        palette = self._palette(int(labels[valid].max(initial=0)))
        drawn = image.astype(np.float32)
        colours = palette[labels[valid]]
        drawn[valid] = (1 - self.alpha) * drawn[valid] + self.alpha * colours
        drawn = drawn.round().clip(0, 255).astype(np.uint8)
        self.set_image(drawn)
        return drawn

    @master_only
    def add_datasample(self, name, image, data_sample=None, draw_gt=True, draw_pred=True,
                       show=False, wait_time=0, out_file=None, pred_score_thr=None, step=0):
        """Draw ``gt_sem_seg`` | ``pred_sem_seg`` of ``data_sample`` over ``image``, side by side.

        Args:
            name (str): image identifier for vis backends / the window title.
            image (np.ndarray): HWC RGB uint8, the original image (predictions are at
                its size).
            data_sample (DataSample, optional): with gt_sem_seg / pred_sem_seg.
            draw_gt, draw_pred (bool): which panels to draw.
            show (bool): show in a window; wait_time (float): seconds, 0 = forever.
            out_file (str, optional): write a PNG here instead of to the vis backends.
            pred_score_thr: unused (class maps have no scores); accepted so one
                visualization hook serves detection and segmentation.
            step (int): global step for the vis backends.
        """
        image = np.ascontiguousarray(image).clip(0, 255).astype(np.uint8)
        panels = []
        if data_sample is not None:
            if draw_gt and 'gt_sem_seg' in data_sample:
                panels.append(self.draw_sem_seg(image, data_sample.gt_sem_seg))
            if draw_pred and 'pred_sem_seg' in data_sample:
                panels.append(self.draw_sem_seg(image, data_sample.pred_sem_seg))
        drawn = np.concatenate(panels, axis=1) if panels else image
        self.set_image(drawn)
        if show:
            self.show(drawn, win_name=name, wait_time=wait_time)
        if out_file is not None:
            mmcv.imwrite(drawn[..., ::-1], out_file)  # imwrite takes BGR
        else:
            self.add_image(name, drawn, step)
