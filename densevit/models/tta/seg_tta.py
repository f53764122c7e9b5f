"""Segmentation test-time augmentation: class probabilities averaged over views."""
from mmengine.model import BaseTTAModel
from mmengine.structures import PixelData

from densevit.models.heads.decode_head import class_argmax
from densevit.models.tta.support import check_head
from densevit.registry import MODELS


@MODELS.register_module()
class SegTTAModel(BaseTTAModel):
    """Wraps an ``EncoderDecoder``; each view (a scale, a flip) is predicted by the
    segmentor's own ``predict`` (whole or slide, as its ``test_cfg`` says), which
    already cuts the padding, undoes the flip and resizes the logits to the original
    image; here the views' softmax probabilities are averaged, as MMSegmentation's
    ``SegTTAModel`` does.

    Output per image: ``seg_logits`` = the mean probabilities [K, H0, W0] (not logits),
    ``pred_sem_seg`` = their argmax [1, H0, W0], ``gt_sem_seg`` of the first view.
    """

    def __init__(self, module, data_preprocessor=None):
        super().__init__(module, data_preprocessor)
        check_head(self.module, 'SegTTAModel')

    def merge_preds(self, data_samples_list):
        """data_samples_list: per image, its views' DataSamples -> one DataSample each."""
        merged = []
        for views in data_samples_list:
            probs = sum(v.seg_logits.data.float().softmax(0) for v in views) / len(views)
            out = views[0]
            out.seg_logits = PixelData(data=probs)
            out.pred_sem_seg = PixelData(data=class_argmax(probs, 0)[None])
            out.set_metainfo(dict(flip=False, flip_direction=None, tta_views=len(views)))
            merged.append(out)
        return merged
