"""tools/test.py prints the panoptic quality table and mask AP when the metrics have them."""
from densevit.evaluation.panoptic_quality import pq_metrics, pq_results

from tiny_run import load_tool


def test_summary_lines():
    tool = load_tool('tools/test.py')
    pq = pq_metrics(pq_results([[1.5, 2, 1, 1], [0.9, 1, 0, 0]], [True, False]))
    metrics = {f'coco_panoptic/{k}': v for k, v in pq.items()}
    metrics.update({'coco/segm_mAP': 0.4123, 'coco/segm_mAP_50': 0.6, 'coco/bbox_mAP': 0.3})
    lines = tool.summary(metrics)
    assert lines[0] == 'panoptic quality (%):'
    table = lines[1].splitlines()
    assert table[0].split() == ['PQ', 'SQ', 'RQ']
    # things: sum IoU 1.5 over TP 2 + FP/2 + FN/2 = 3; stuff: 0.9 / 1
    assert table[2].split() == ['Things', '50.00', '75.00', '66.67']
    assert table[3].split() == ['Stuff', '90.00', '90.00', '100.00']
    assert lines[2] == 'mask AP: AP 0.412  AP50 0.600'
    assert tool.summary({'mIoU': 40.0, 'coco/bbox_mAP': 0.3}) == []
