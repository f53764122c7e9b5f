"""Detection test-time augmentation: boxes of all views mapped back and de-duplicated."""
import torch
from mmengine.model import BaseTTAModel
from mmengine.structures import InstanceData

from densevit.models.tta.nms import batched_nms, flip_boxes
from densevit.models.tta.support import check_head
from densevit.registry import MODELS


@MODELS.register_module()
class DetTTAModel(BaseTTAModel):
    """Wraps a ``DETR`` / ``DeformableDETR``, merging views as MMDetection's
    ``DetTTAModel``: each view's ``pred_instances`` are already in pixels of the
    original image (the head divides by ``scale_factor``), so only a flip is undone
    (``x1' = W0 - x2`` with the original width); the views' boxes are concatenated and
    de-duplicated by class-wise NMS (``nms.py``, in torch), keeping the best
    ``max_per_img``, highest score first.

    Args:
        module (dict | nn.Module): the detector.
        tta_cfg (dict): ``nms=dict(iou_threshold=0.5)``, ``max_per_img=100`` (mmdet's).
    """

    def __init__(self, module, tta_cfg=None, data_preprocessor=None):
        super().__init__(module, data_preprocessor)
        check_head(self.module, 'DetTTAModel')
        cfg = dict(tta_cfg or {})
        nms = dict(cfg.get('nms') or {})
        nms_type = nms.pop('type', 'nms')
        if nms_type != 'nms':
            raise ValueError(f"DetTTAModel: tta_cfg.nms.type {nms_type!r} is not supported "
                             "(only 'nms', class-wise, in torch)")
        self.iou_threshold = float(nms.pop('iou_threshold', 0.5))
        if nms:
            raise ValueError(f'DetTTAModel: unknown tta_cfg.nms keys {sorted(nms)}')
        self.max_per_img = int(cfg.get('max_per_img', 100))

    def merge_preds(self, data_samples_list):
        """data_samples_list: per image, its views' DataSamples -> one DataSample each."""
        return [self.merge_views(views) for views in data_samples_list]

    def merge_views(self, views):
        """Views of one image -> the first view's DataSample with merged ``pred_instances``
        (``bboxes`` [M, 4] xyxy of the original image, ``scores`` [M], ``labels`` [M])."""
        boxes, scores, labels = [], [], []
        for v in views:
            pred, meta = v.pred_instances, v.metainfo
            b = pred.bboxes
            if meta.get('flip', False):
                b = flip_boxes(b, meta['ori_shape'], meta.get('flip_direction') or 'horizontal')
            boxes.append(b)
            scores.append(pred.scores)
            labels.append(pred.labels)
        boxes, scores, labels = torch.cat(boxes), torch.cat(scores), torch.cat(labels)
        keep = batched_nms(boxes, scores, labels, self.iou_threshold)[:self.max_per_img]
        out = views[0]
        out.pred_instances = InstanceData(bboxes=boxes[keep], scores=scores[keep],
                                          labels=labels[keep])
        out.set_metainfo(dict(flip=False, flip_direction=None, tta_views=len(views)))
        return out
