"""What a ``DataSample`` is drawn as (panoptic segments > instance masks > the visualizer's
own boxes or class maps), on the image enlarged when small, as gt | pred panels."""
import mmcv
import numpy as np
from mmengine.dist import master_only
from mmengine.visualization import Visualizer

from densevit.visualization.enlarge import MIN_SIDE, enlarge, enlarge_factor, fit_map, fit_masks
from densevit.visualization.mask_drawing import label_point, paint_masks
from densevit.visualization.palette import class_palette, segment_colors
from densevit.visualization.panoptic_drawing import panoptic_map, panoptic_segments

KINDS = ('plain', 'masks', 'panoptic')  # what a panel may be drawn as, least to most


def to_numpy(x):
    """A tensor (any device) or array-like as a numpy array."""
    return x.detach().cpu().numpy() if hasattr(x, 'detach') else np.asarray(x)


def kept_instances(instances, score_thr=None):
    """``InstanceData`` -> dict of numpy ``labels`` int64 [N], ``bboxes`` float64 [N, 4]
    (xyxy), ``scores`` [N], ``masks`` bool [N, h, w] (None where absent), those scoring
    under ``score_thr`` left out."""
    fields = {key: (to_numpy(instances[key]) if key in instances else None)
              for key in ('labels', 'bboxes', 'scores', 'masks')}
    n = len(fields['labels'].reshape(-1))
    out = dict(labels=fields['labels'].astype(np.int64).reshape(n),
               bboxes=None if fields['bboxes'] is None
               else fields['bboxes'].astype(np.float64).reshape(n, 4),
               scores=None if fields['scores'] is None else fields['scores'].reshape(n),
               masks=None if fields['masks'] is None else fields['masks'].astype(bool))
    if score_thr is not None and out['scores'] is not None:
        keep = out['scores'] >= score_thr
        out = {k: None if v is None else v[keep] for k, v in out.items()}
    return out


def sample_kinds(data_sample, prefix):
    """The drawings of :data:`KINDS` that ``data_sample`` holds the data of for ``prefix``,
    least to most: ``'plain'`` always, ``'masks'`` (``<prefix>_instances`` with masks),
    ``'panoptic'`` (``<prefix>_panoptic_seg``)."""
    instances = data_sample.get(f'{prefix}_instances')
    has = dict(plain=True, masks=instances is not None and 'masks' in instances,
               panoptic=f'{prefix}_panoptic_seg' in data_sample)
    return [kind for kind in KINDS if has[kind]]


class SampleVisualizer(Visualizer):
    """Base of densevit's visualizers: a data sample's gt | pred panels, each drawn as the
    richest of panoptic segments, instance masks and the subclass's own drawing
    (:meth:`draw_plain`: boxes, class maps) that the prediction holds, the ground truth
    drawn the same way where it can be.

    Images whose shorter side is under ``min_side`` are enlarged by an integer factor
    first (each pixel a block; maps, masks and boxes follow), so that labels stay small
    beside the objects.

    Args:
        name, image, vis_backends, save_dir: see ``mmengine.visualization.Visualizer``.
        fill_alpha (float): opacity of mask and segment colours.
        box_alpha (float): opacity of box edges.
        line_width (int): box edge and mask outline width in pixels (of the drawing).
        text_color: label text colour (RGB 0-255 tuple or matplotlib name).
        min_side (int): enlarge images whose shorter side is below it (0: never).

    Class names come from ``dataset_meta['classes']`` (the runner sets it from the
    dataset), colours from ``dataset_meta['palette']`` when given, else generated.
    """

    def __init__(self, name='visualizer', image=None, vis_backends=None, save_dir=None,
                 fill_alpha=0.5, box_alpha=0.8, line_width=2, text_color=(255, 255, 255),
                 min_side=MIN_SIDE):
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir)
        self.fill_alpha = fill_alpha
        self.box_alpha = box_alpha
        self.line_width = line_width
        self.text_color = text_color
        self.min_side = min_side

    def _class_info(self, max_label):
        """(names, palette) covering labels 0..``max_label`` at least."""
        meta = self.dataset_meta or {}
        classes = list(meta.get('classes', ()) or ())
        num = max(len(classes), max_label + 1)
        names = classes + [f'class {i}' for i in range(len(classes), num)]
        palette = [tuple(c) for c in (meta.get('palette') or ())]
        return names, palette + class_palette(num)[len(palette):]

    def draw_labels(self, texts, positions, colors, centered=False):
        """``texts`` at ``positions`` [N, 2] (x, y: each text's top-left corner, or its
        middle when ``centered``) on boxes of ``colors`` (RGB 0-255), over the current image."""
        align = dict(horizontal_alignments='center', vertical_alignments='center')
        self.draw_texts(texts, np.asarray(positions, np.float64).reshape(-1, 2),
                        colors=self.text_color,
                        font_sizes=int(max(8, min(14, self._default_font_size * 0.9))),
                        bboxes=[dict(facecolor=np.array(c) / 255, alpha=0.8, pad=0.7,
                                     edgecolor='none') for c in colors],
                        **(align if centered else {}))

    def draw_boxes(self, bboxes, labels, scores, colors):
        """Boxes ``bboxes`` [N, 4] (xyxy, pixels of the current image) in ``colors``,
        labelled "class" or "class: score" (``scores`` [N] or None) at their corner."""
        # Untrained heads emit inverted or out-of-image boxes; draw_bboxes asserts on the
        # former and warns on the latter, where "inside" means x < width and y < height
        # (so an edge on the image border, x = width, counts as outside).
        bboxes = np.concatenate([np.minimum(bboxes[:, :2], bboxes[:, 2:]),
                                 np.maximum(bboxes[:, :2], bboxes[:, 2:])], axis=1)
        bboxes = bboxes.clip(0, np.array([self.width, self.height] * 2, np.float64) - 1e-3)
        names = self._class_info(int(labels.max()))[0]
        self.draw_bboxes(bboxes, edge_colors=list(colors), alpha=self.box_alpha,
                         line_widths=self.line_width)
        texts = [names[label] if scores is None else f'{names[label]}: {scores[i]:.2f}'
                 for i, label in enumerate(labels)]
        self.draw_labels(texts, bboxes[:, :2] + self.line_width, colors)

    def draw_instance_masks(self, image, instances, score_thr=None, scale=1):
        """``instances.masks`` (bool [N, h, w], fitted to ``image``) scoring at least
        ``score_thr``, filled in one colour per instance (its class colour, shaded) and
        outlined, with its box (``bboxes`` xyxy in pixels of the image before an
        enlargement by ``scale``) and "class: score" label, over ``image`` (HWC RGB uint8).
        Returns the drawn HWC RGB uint8 image."""
        kept = kept_instances(instances, score_thr)
        labels = kept['labels']
        colors = segment_colors(labels, self._class_info(int(labels.max(initial=0)))[1])
        masks = fit_masks(kept['masks'], image.shape[:2])
        self.set_image(paint_masks(image, masks, colors, self.fill_alpha, self.line_width))
        if len(labels) and kept['bboxes'] is not None:
            self.draw_boxes(kept['bboxes'] * scale, labels, kept['scores'], colors)
        elif len(labels):
            names = self._class_info(int(labels.max()))[0]
            self.draw_labels([names[label] for label in labels],
                             [label_point(m) for m in masks], colors, centered=True)
        return self.get_image()

    def draw_panoptic(self, image, panoptic_seg):
        """Each segment of ``panoptic_seg`` (a panoptic map [1, h, w], ``label + instance *
        1000``, fitted to ``image``) filled in its colour (stuff: the class colour; the
        instances of a thing class: one shade each) and outlined, its class name at its
        innermost pixel, over ``image`` (HWC RGB uint8). VOID (label = the number of
        ``dataset_meta['classes']``, or the map's ``ignore_index``) is left undrawn.
        Returns the drawn HWC RGB uint8 image."""
        ids = fit_map(panoptic_map(panoptic_seg).astype(np.int32), image.shape[:2])
        classes = (self.dataset_meta or {}).get('classes') or ()
        void = getattr(panoptic_seg, 'metainfo', {}).get('ignore_index')
        values, labels, _ = panoptic_segments(ids, len(classes) or None, void)
        names, palette = self._class_info(int(labels.max(initial=0)))
        masks = ids[None] == values[:, None, None].astype(ids.dtype)
        colors = segment_colors(labels, palette)
        self.set_image(paint_masks(image, masks, colors, self.fill_alpha, self.line_width))
        if len(values):
            self.draw_labels([names[label] for label in labels],
                             [label_point(m) for m in masks], colors, centered=True)
        return self.get_image()

    def draw_plain(self, image, data_sample, prefix, score_thr, scale):
        """The subclass's own drawing of ``<prefix>_*`` on ``image`` (enlarged ``scale``
        times), or None when the sample has nothing it draws."""
        raise NotImplementedError

    def draw_panel(self, image, data_sample, prefix, kind, score_thr=None, scale=1):
        """``<prefix>`` ('gt' / 'pred') of ``data_sample`` drawn on ``image`` as the richest
        drawing it holds up to ``kind`` (:data:`KINDS`); None when nothing is drawn."""
        kind = [k for k in sample_kinds(data_sample, prefix)
                if KINDS.index(k) <= KINDS.index(kind)][-1]
        if kind == 'panoptic':
            return self.draw_panoptic(image, data_sample.get(f'{prefix}_panoptic_seg'))
        if kind == 'masks':
            return self.draw_instance_masks(image, data_sample.get(f'{prefix}_instances'),
                                            score_thr, scale)
        return self.draw_plain(image, data_sample, prefix, score_thr, scale)

    @master_only
    def add_datasample(self, name, image, data_sample=None, draw_gt=True, draw_pred=True,
                       show=False, wait_time=0, out_file=None, pred_score_thr=0.3, step=0):
        """Draw the ground truth | prediction of ``data_sample`` over ``image``, side by side.

        What the prediction holds decides the drawing (panoptic segments, else instance
        masks, else :meth:`draw_plain`); the ground truth is drawn the same way where it
        has the data, else in a simpler one.

        Args:
            name (str): image identifier for vis backends / the window title.
            image (np.ndarray): HWC RGB uint8, the original image (predictions are at its
                size); enlarged by an integer factor when its shorter side is under
                ``min_side``.
            data_sample (DataSample, optional): with gt_* / pred_* fields.
            draw_gt, draw_pred (bool): which panels to draw.
            show (bool): show in a window; wait_time (float): seconds, 0 = forever.
            out_file (str, optional): write a PNG here instead of to the vis backends.
            pred_score_thr (float): predicted boxes and masks under this score are not drawn.
            step (int): global step for the vis backends.
        """
        image = np.ascontiguousarray(image).clip(0, 255).astype(np.uint8)
        scale = enlarge_factor(image.shape, self.min_side)
        image = enlarge(image, scale)
        panels = []
        if data_sample is not None:
            has_pred = draw_pred and any(k.startswith('pred_') for k in data_sample.keys())
            kind = sample_kinds(data_sample, 'pred')[-1] if has_pred else KINDS[-1]
            for prefix, on, thr in (('gt', draw_gt, None), ('pred', draw_pred, pred_score_thr)):
                panel = self.draw_panel(image, data_sample, prefix, kind, thr, scale) if on \
                    else None
                if panel is not None:
                    panels.append(panel)
        drawn = np.concatenate(panels, axis=1) if panels else image
        self.set_image(drawn)
        if show:
            self.show(drawn, win_name=name, wait_time=wait_time)
        if out_file is not None:
            mmcv.imwrite(drawn[..., ::-1], out_file)  # imwrite takes BGR
        else:
            self.add_image(name, drawn, step)
