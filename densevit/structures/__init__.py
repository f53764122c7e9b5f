from .bbox import (
    aligned_box_iou,
    aligned_generalized_box_iou,
    box_area,
    box_centers,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xyxy_to_cxcywh,
    decode_deltas,
    generalized_box_iou,
)
from .data_sample import DataSample
from .panoptic import INSTANCE_OFFSET, id_to_rgb, rgb_to_id

__all__ = ['INSTANCE_OFFSET', 'DataSample', 'aligned_box_iou', 'aligned_generalized_box_iou', 'box_area',
           'box_centers', 'box_cxcywh_to_xyxy', 'box_iou',
           'box_xyxy_to_cxcywh', 'decode_deltas', 'generalized_box_iou', 'id_to_rgb', 'rgb_to_id']
