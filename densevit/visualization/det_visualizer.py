"""Draw ground-truth and predicted boxes of a ``DataSample``, side by side (gt | pred)."""
import colorsys

import mmcv
import numpy as np
from mmengine.dist import master_only
from mmengine.visualization import Visualizer

from densevit.registry import VISUALIZERS


def class_palette(num_classes):
    """``num_classes`` distinct RGB tuples (0-255), the same on every run.

    Hues step by the golden ratio so that neighbouring labels get far-apart colors.
    """
    colors = []
    for i in range(num_classes):
        r, g, b = colorsys.hsv_to_rgb((i * 0.618033988749895) % 1.0, 0.85, 0.95)
        colors.append((int(r * 255), int(g * 255), int(b * 255)))
    return colors


def to_numpy(x):
    """A tensor (any device) or array-like as a numpy array."""
    return x.detach().cpu().numpy() if hasattr(x, 'detach') else np.asarray(x)


@VISUALIZERS.register_module()
class DetLocalVisualizer(Visualizer):
    """mmengine ``Visualizer`` that draws detection boxes with class names and scores.

    Args:
        name, image, vis_backends, save_dir: see ``mmengine.visualization.Visualizer``.
        line_width (float): box edge width in pixels.
        alpha (float): box edge opacity.
        text_color: label text color (RGB 0-255 tuple or matplotlib name).

    Class names come from ``dataset_meta['classes']`` (the runner sets it from
    the dataset); colors from ``dataset_meta['palette']`` if given.
    """

    def __init__(self, name='visualizer', image=None, vis_backends=None, save_dir=None,
                 line_width=2, alpha=0.8, text_color=(255, 255, 255)):
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir)
        self.line_width = line_width
        self.alpha = alpha
        self.text_color = text_color

    def _class_info(self, max_label):
        meta = self.dataset_meta or {}
        classes = list(meta.get('classes', ()))
        num = max(len(classes), max_label + 1)
        names = classes + [f'class {i}' for i in range(len(classes), num)]
        palette = [tuple(c) for c in meta.get('palette', ())] or class_palette(num)
        palette = palette + class_palette(num)[len(palette):]
        return names, palette

    def draw_instances(self, image, instances, score_thr=None):
        """Draw ``instances.bboxes`` (xyxy) with labels (and scores) on ``image``.

        Returns the drawn RGB uint8 image. With ``score_thr``, boxes scoring
        below it are left out.
        """
        self.set_image(image)
        if instances is None or 'bboxes' not in instances or len(instances.bboxes) == 0:
            return self.get_image()
        bboxes = to_numpy(instances.bboxes).astype(np.float64).reshape(-1, 4)
        labels = to_numpy(instances.labels).astype(np.int64).reshape(-1)
        scores = to_numpy(instances.scores).reshape(-1) if 'scores' in instances else None
        if score_thr is not None and scores is not None:
            keep = scores >= score_thr
            bboxes, labels, scores = bboxes[keep], labels[keep], scores[keep]
        if len(bboxes) == 0:
            return self.get_image()
        # Untrained heads emit inverted or out-of-image boxes; draw_bboxes asserts on
        # the former and warns on the latter, where "inside" means x < width and
        # y < height (so an edge on the image border, x = width, counts as outside).
        h, w = image.shape[:2]
        bboxes = np.concatenate([np.minimum(bboxes[:, :2], bboxes[:, 2:]),
                                 np.maximum(bboxes[:, :2], bboxes[:, 2:])], axis=1)
        inside = np.array([w, h, w, h], np.float64) - 1e-3
        bboxes = bboxes.clip(0, inside)
        names, palette = self._class_info(int(labels.max()))
        colors = [palette[label] for label in labels]
        self.draw_bboxes(bboxes, edge_colors=colors, alpha=self.alpha,
                         line_widths=self.line_width)
        texts = [names[label] if scores is None else f'{names[label]}: {score:.2f}'
                 for label, score in zip(labels, scores if scores is not None else labels,
                                         strict=True)]
        font_size = int(max(8, min(14, self._default_font_size * 0.9)))
        self.draw_texts(texts, bboxes[:, :2] + self.line_width, colors=self.text_color,
                        font_sizes=font_size,
                        bboxes=[dict(facecolor=np.array(c) / 255, alpha=0.8, pad=0.7,
                                     edgecolor='none') for c in colors])
        return self.get_image()

    @master_only
    def add_datasample(self, name, image, data_sample=None, draw_gt=True, draw_pred=True,
                       show=False, wait_time=0, out_file=None, pred_score_thr=0.3, step=0):
        """Draw ``gt_instances`` | ``pred_instances`` of ``data_sample`` on ``image``.

        Args:
            name (str): image identifier for vis backends / the window title.
            image (np.ndarray): HWC RGB uint8, the image the boxes refer to.
            data_sample (DataSample, optional): with gt_instances / pred_instances.
            draw_gt, draw_pred (bool): which halves to draw; both gives gt | pred.
            show (bool): show in a window; wait_time (float): seconds, 0 = forever.
            out_file (str, optional): write a PNG here instead of to the vis backends.
            pred_score_thr (float): predictions below this score are not drawn.
            step (int): global step for the vis backends.
        """
        image = np.ascontiguousarray(image).clip(0, 255).astype(np.uint8)
        panels = []
        if data_sample is not None:
            if draw_gt and 'gt_instances' in data_sample:
                panels.append(self.draw_instances(image, data_sample.gt_instances))
            if draw_pred and 'pred_instances' in data_sample:
                panels.append(self.draw_instances(image, data_sample.pred_instances,
                                                  score_thr=pred_score_thr))
        drawn = np.concatenate(panels, axis=1) if panels else image
        if show:
            self.show(drawn, win_name=name, wait_time=wait_time)
        if out_file is not None:
            mmcv.imwrite(drawn[..., ::-1], out_file)  # imwrite takes BGR
        else:
            self.add_image(name, drawn, step)
