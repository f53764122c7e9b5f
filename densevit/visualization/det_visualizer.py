"""Draw ground-truth and predicted boxes of a ``DataSample``, side by side (gt | pred)."""
from densevit.registry import VISUALIZERS
from densevit.visualization.enlarge import MIN_SIDE
from densevit.visualization.sample_drawing import SampleVisualizer, kept_instances


@VISUALIZERS.register_module()
class DetLocalVisualizer(SampleVisualizer):
    """mmengine ``Visualizer`` that draws detection boxes with class names and scores
    (instance masks and panoptic segments too when the predictions hold them:
    :class:`~densevit.visualization.sample_drawing.SampleVisualizer`).

    Args:
        name, image, vis_backends, save_dir: see ``mmengine.visualization.Visualizer``.
        line_width (float): box edge width in pixels.
        alpha (float): box edge opacity.
        text_color: label text color (RGB 0-255 tuple or matplotlib name).
        fill_alpha (float): opacity of mask colours.
        min_side (int): images whose shorter side is below it are drawn enlarged (0: never).

    Class names come from ``dataset_meta['classes']`` (the runner sets it from
    the dataset); colors from ``dataset_meta['palette']`` if given.
    """

    def __init__(self, name='visualizer', image=None, vis_backends=None, save_dir=None,
                 line_width=2, alpha=0.8, text_color=(255, 255, 255), fill_alpha=0.5,
                 min_side=MIN_SIDE):
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir,
                         fill_alpha=fill_alpha, box_alpha=alpha, line_width=line_width,
                         text_color=text_color, min_side=min_side)
        self.alpha = alpha

    def draw_instances(self, image, instances, score_thr=None, scale=1):
        """Draw ``instances.bboxes`` (xyxy, in pixels of ``image`` before an enlargement by
        ``scale``) with labels (and scores) on ``image`` (HWC RGB uint8).

        Returns the drawn RGB uint8 image. With ``score_thr``, boxes scoring
        below it are left out.
        """
        self.set_image(image)
        if instances is None or 'bboxes' not in instances or len(instances.bboxes) == 0:
            return self.get_image()
        kept = kept_instances(instances, score_thr)
        labels = kept['labels']
        if len(labels) == 0:
            return self.get_image()
        palette = self._class_info(int(labels.max()))[1]
        self.draw_boxes(kept['bboxes'] * scale, labels, kept['scores'],
                        [palette[label] for label in labels])
        return self.get_image()

    def draw_plain(self, image, data_sample, prefix, score_thr, scale):
        """``<prefix>_instances`` as boxes, or None when the sample has none."""
        if f'{prefix}_instances' not in data_sample:
            return None
        return self.draw_instances(image, data_sample.get(f'{prefix}_instances'), score_thr,
                                   scale)
