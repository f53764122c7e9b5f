"""Draw validation / test predictions with the runner's visualizer (``--show-dir``)."""
import os.path as osp

import mmcv
import torch
from mmengine.hooks import Hook
from mmengine.utils import mkdir_or_exist
from mmengine.visualization import Visualizer

from densevit.registry import HOOKS


def gt_in_original_image(data_sample):
    """A copy of ``data_sample`` whose ``gt_instances.bboxes`` are in original-image pixels.

    Ground truth is kept in the pixels of the transformed image (DataSample
    contract) while predictions are in the original image's, which is what is
    drawn on: undo the flip (within ``img_shape``), then the resize.
    """
    if 'gt_instances' not in data_sample or 'bboxes' not in data_sample.gt_instances:
        return data_sample
    meta = data_sample.metainfo
    boxes = torch.as_tensor(data_sample.gt_instances.bboxes, dtype=torch.float32).clone()
    if meta.get('flip', False) and 'img_shape' in meta:
        h, w = meta['img_shape'][:2]
        direction = meta.get('flip_direction', 'horizontal')
        if direction in ('horizontal', 'diagonal'):
            boxes[:, [0, 2]] = w - boxes[:, [2, 0]]
        if direction in ('vertical', 'diagonal'):
            boxes[:, [1, 3]] = h - boxes[:, [3, 1]]
    if meta.get('scale_factor') is not None:
        sx, sy = meta['scale_factor'][:2]
        boxes = boxes / boxes.new_tensor([sx, sy, sx, sy])
    gt = data_sample.gt_instances.clone()
    gt.bboxes = boxes
    sample = data_sample.clone()
    sample.gt_instances = gt
    return sample


@HOOKS.register_module(name=['PredictionVisualizationHook', 'DetVisualizationHook',
                             'SegVisualizationHook'])
class PredictionVisualizationHook(Hook):
    """Draw gt | pred of validation and test images: boxes, instance masks, panoptic segments
    or class maps, whichever the prediction holds and the runner's visualizer draws
    (``DetLocalVisualizer``, ``SegLocalVisualizer``).

    Registered also as ``DetVisualizationHook`` and ``SegVisualizationHook``, the names
    MMDetection and MMSegmentation configs use; the hook itself is the same for both
    tasks: which images, when, where the PNGs go, how the original image is read.
    Segmentation ground truth needs no mapping back (the test pipeline keeps label maps
    at the original size); ``score_thr`` applies to boxes only.

    Validation: the first image of every ``interval``-th batch goes to the vis
    backends. Test: every image, written to ``test_out_dir`` when given (relative
    paths land in ``<work_dir>/<timestamp>/``), else to the vis backends.
    Nothing is drawn unless ``draw=True`` (``tools/test.py --show-dir`` sets it).

    Args:
        draw (bool): draw at all.
        interval (int): validation batches between drawings.
        score_thr (float): predictions below it are not drawn.
        show (bool): also show each image in a window; wait_time (float): seconds.
        test_out_dir (str, optional): folder for the test images.
        backend_args (dict, optional): mmengine fileio backend to read images with.
    """

    priority = 'NORMAL'

    def __init__(self, draw=False, interval=50, score_thr=0.3, show=False, wait_time=0.,
                 test_out_dir=None, backend_args=None):
        self.draw = draw
        self.interval = interval
        self.score_thr = score_thr
        self.show = show
        self.wait_time = wait_time
        self.test_out_dir = test_out_dir
        self.backend_args = backend_args
        self._test_index = 0
        self._out_dir = None

    def _load_image(self, data_sample, data_batch, index):
        """Original image as HWC RGB uint8, from ``img_path``.

        Datasets without files (procedural data) fall back to the batch input,
        resized to ``ori_shape`` and taken as BGR like LoadImageFromFile's output.
        """
        img_path = data_sample.metainfo.get('img_path')
        if img_path is not None:  # in the frame training used (EXIF: see LoadImage)
            from densevit.datasets.transforms.loading import LoadImage
            h, w = data_sample.metainfo.get('ori_shape', (None, None))[:2]
            loaded = LoadImage(backend_args=self.backend_args)(
                dict(img_path=img_path, width=w, height=h))
            return loaded['img'][..., ::-1]
        img = data_batch['inputs'][index].permute(1, 2, 0).cpu().numpy()
        if 'ori_shape' in data_sample.metainfo:
            h, w = data_sample.metainfo['ori_shape'][:2]
            img = mmcv.imresize(img, (w, h))
        return img[..., ::-1]

    def _draw(self, name, data_sample, data_batch, index, out_file, step):
        image = self._load_image(data_sample, data_batch, index)
        Visualizer.get_current_instance().add_datasample(
            name, image, data_sample=gt_in_original_image(data_sample), show=self.show,
            wait_time=self.wait_time, out_file=out_file, pred_score_thr=self.score_thr,
            step=step)

    @staticmethod
    def _name(data_sample, default):
        img_path = data_sample.metainfo.get('img_path')
        if img_path is not None:
            return osp.basename(img_path)
        return f"{data_sample.metainfo.get('img_id', default)}.png"

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if not self.draw or not outputs:
            return
        step = runner.iter + batch_idx
        if step % self.interval == 0:
            name = self._name(outputs[0], step) if self.show else 'val_img'
            self._draw(name, outputs[0], data_batch, 0, None, step)

    def _test_dir(self, runner):
        """``test_out_dir`` resolved once: relative paths go under work_dir/timestamp."""
        if self._out_dir is None and self.test_out_dir is not None:
            # osp.join keeps an absolute test_out_dir as it is.
            self._out_dir = osp.join(runner.work_dir, runner.timestamp, self.test_out_dir)
            mkdir_or_exist(self._out_dir)
        return self._out_dir

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if not self.draw:
            return
        out_dir = self._test_dir(runner)
        for index, data_sample in enumerate(outputs or ()):
            self._test_index += 1
            base = self._name(data_sample, self._test_index)
            out_file = osp.join(out_dir, base) if out_dir is not None else None
            self._draw(base if self.show else 'test_img', data_sample, data_batch, index,
                       out_file, self._test_index)
