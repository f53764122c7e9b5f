"""SegLocalVisualizer: palette blending, ignore pixels, gt | pred panels written as PNG."""
import cv2
import numpy as np
import torch
from mmengine.structures import PixelData

from densevit.structures import DataSample
from densevit.visualization.enlarge import enlarge_factor
from densevit.visualization.seg_visualizer import SegLocalVisualizer


def make_visualizer(name, **kwargs):
    vis = SegLocalVisualizer(name=name, **kwargs)
    vis.dataset_meta = dict(classes=('a', 'b'), palette=[[255, 0, 0], [0, 0, 255]])
    return vis


def test_draw_sem_seg_blends_palette_and_skips_ignore():
    vis = make_visualizer('seg_vis_blend', alpha=0.5)
    image = np.full((2, 3, 3), 100, np.uint8)
    labels = torch.tensor([[[0, 1, 255], [1, 0, 255]]])
    drawn = vis.draw_sem_seg(image, PixelData(data=labels))
    assert drawn[0, 0].tolist() == [178, 50, 50]   # (100 + 255) / 2 -> 177.5 rounds to 178
    assert drawn[0, 1].tolist() == [50, 50, 178]
    assert drawn[0, 2].tolist() == [100, 100, 100]  # ignored: the image shows through
    # labels beyond the palette get generated colours; maps of another size are resized
    big = vis.draw_sem_seg(np.zeros((4, 6, 3), np.uint8), torch.tensor([[0, 5], [5, 0]]))
    assert big.shape == (4, 6, 3) and (big[0, 0] == [128, 0, 0]).all()


def test_add_datasample_writes_gt_beside_pred(tmp_path):
    vis = make_visualizer('seg_vis_file', alpha=1.0)
    image = np.zeros((4, 5, 3), np.uint8)
    ds = DataSample(gt_sem_seg=PixelData(data=torch.zeros(1, 4, 5, dtype=torch.long)),
                    pred_sem_seg=PixelData(data=torch.ones(1, 4, 5, dtype=torch.long)))
    out = tmp_path / 'x.png'
    vis.add_datasample('x', image, ds, out_file=str(out), pred_score_thr=0.3)
    drawn = cv2.imread(str(out))[..., ::-1]
    s = enlarge_factor((4, 5))  # a small image is drawn enlarged, each pixel an s x s block
    assert drawn.shape == (4 * s, 10 * s, 3)
    assert (drawn[:, :5 * s] == [255, 0, 0]).all() and (drawn[:, 5 * s:] == [0, 0, 255]).all()
