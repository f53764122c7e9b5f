from .bbox import box_area, box_cxcywh_to_xyxy, box_iou, box_xyxy_to_cxcywh, generalized_box_iou
from .data_sample import DataSample

__all__ = ['DataSample', 'box_area', 'box_cxcywh_to_xyxy', 'box_iou', 'box_xyxy_to_cxcywh',
           'generalized_box_iou']
