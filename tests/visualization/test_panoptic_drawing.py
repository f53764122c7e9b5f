"""Panoptic segments and instance masks drawn over an image (colour per segment, VOID left
undrawn), small images enlarged, and tools/test.py --show-dir on a tiny panoptic EoMT."""
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData, PixelData

from densevit.engine.cli import load_config
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.visualization.enlarge import enlarge, enlarge_factor
from densevit.visualization.palette import segment_colors
from densevit.visualization.sample_drawing import SampleVisualizer
from densevit.visualization.seg_visualizer import SegLocalVisualizer

from tiny_run import isolated, load_tool, tiny_seg_data, unique_names

CLASSES = ('circle', 'square', 'sky', 'grass')  # things 0-1, stuff 2-3; VOID = 4
PALETTE = [(255, 0, 0), (0, 0, 255), (0, 200, 255), (0, 160, 0)]
VOID = len(CLASSES)


def visualizer(name, **kwargs):
    vis = SegLocalVisualizer(name=name, **kwargs)
    vis.dataset_meta = dict(classes=CLASSES, palette=PALETTE)
    return vis


def image(h, w):
    """A grey image with a horizontal ramp (not flat, so unchanged means unchanged)."""
    img = np.full((h, w, 3), 90, np.uint8)
    img[..., 1] = np.linspace(40, 200, w, dtype=np.uint8)[None]
    return img


def panoptic_map(h=32, w=48, scale=1):
    """sky above, grass below, two circles (instances 1, 2) and a square (3), VOID corner;
    each pixel a ``scale`` x ``scale`` block."""
    ids = np.full((h, w), 2, np.int64)
    ids[h // 2:] = 3
    ids[4:14, 4:14] = 0 + 1 * 1000
    ids[18:28, 4:14] = 0 + 2 * 1000
    ids[8:24, 24:40] = 1 + 3 * 1000
    ids[:4, w - 6:] = VOID
    return enlarge(ids, scale)


def closer(drawn, before, color):
    """bool [N]: which of the pixels [N, 3] moved towards ``color``."""
    color = np.asarray(color, np.float64)
    return (np.abs(drawn.astype(np.float64) - color).sum(-1)
            < np.abs(before.astype(np.float64) - color).sum(-1))


def test_panoptic_segments_take_their_colours_and_void_is_untouched():
    """Every segment's pixels move towards its colour (but where its outline and label
    are); VOID pixels are the image's."""
    vis, img, ids = visualizer('pan_colours'), image(256, 384), panoptic_map(scale=8)
    drawn = vis.draw_panoptic(img, PixelData(sem_seg=torch.from_numpy(ids)[None]))
    assert drawn.shape == img.shape
    # labels: sky 2, grass 3, circle 0 twice, square 1 (in the order of their values)
    colours = dict(zip((2, 3, 1000, 2000, 3001), segment_colors([2, 3, 0, 0, 1], PALETTE),
                       strict=True))
    assert colours[2] == PALETTE[2] and colours[3] == PALETTE[3]  # stuff: the class colour
    assert colours[1000] == PALETTE[0] and colours[2000] != colours[1000]  # two circles differ
    for value, colour in colours.items():
        inside = ids == value
        moved = closer(drawn[inside], img[inside], colour)
        assert moved.mean() > 0.9, value  # the rest: the outline and the label
        filled = (1 - vis.fill_alpha) * img[inside].astype(np.float64) + vis.fill_alpha * np.array(
            colour)
        assert (np.abs(drawn[inside] - filled).max(-1) <= 1).mean() > 0.8, value
    void = ids == VOID
    assert void.sum() == 4 * 6 * 64 and (drawn[void] == img[void]).all()


def test_panoptic_ground_truth_void_from_its_ignore_index():
    """The ground truth's VOID is named by its map's ``ignore_index`` (PackDetInputs), even
    without class names."""
    vis, img = SegLocalVisualizer(name='pan_gt_void'), image(256, 384)
    ids = panoptic_map(scale=8)
    void = ids == VOID
    ids[void] = 255
    drawn = vis.draw_panoptic(img, PixelData(data=torch.from_numpy(ids)[None],
                                             metainfo=dict(ignore_index=255)))
    assert (drawn[void] == img[void]).all() and (drawn[~void] != img[~void]).any(-1).all()


def test_instance_masks_over_the_score_threshold_in_instance_colours():
    vis, img = visualizer('mask_colours'), image(320, 320)
    masks = torch.zeros(3, 320, 320, dtype=torch.bool)
    masks[0, 160:288, 16:112] = masks[1, 160:288, 176:304] = masks[2, 16:80, 16:80] = True
    boxes = torch.tensor([[16., 160, 112, 288], [176, 160, 304, 288], [16, 16, 80, 80]])
    instances = InstanceData(masks=masks, labels=torch.tensor([0, 0, 1]),
                             scores=torch.tensor([0.9, 0.8, 0.1]), bboxes=boxes)
    drawn = vis.draw_instance_masks(img, instances, score_thr=0.3)
    colours = segment_colors([0, 0], PALETTE)
    assert colours[0] != colours[1]  # two circles: two colours
    for mask, colour in zip(masks[:2].numpy(), colours, strict=True):
        assert closer(drawn[mask], img[mask], colour).mean() > 0.9
        assert (drawn[mask] != img[mask]).any(-1).all()  # fill, outline, box and label
    assert (drawn[masks[2].numpy()] == img[masks[2].numpy()]).all()  # under the threshold
    assert (drawn[100:150, 130:160] == img[100:150, 130:160]).all()  # outside every one


def test_small_images_are_enlarged_large_ones_kept(tmp_path):
    assert enlarge_factor((128, 128)) == 4 and enlarge_factor((96, 96)) == 6
    assert enlarge_factor((600, 900)) == 1 and enlarge_factor((100, 100), min_side=0) == 1
    vis = visualizer('pan_sizes')
    for (h, w), want in {(128, 128): (512, 1024), (96, 80): (672, 1120),
                         (520, 600): (520, 1200)}.items():
        ids = np.full((h, w), 2, np.int64)
        ids[h // 4:h // 2, w // 4:w // 2] = 1000
        ds = DataSample(gt_panoptic_seg=PixelData(data=torch.from_numpy(ids)[None]),
                        pred_panoptic_seg=PixelData(sem_seg=torch.from_numpy(ids)[None]))
        out = tmp_path / f'{h}x{w}.png'
        vis.add_datasample('x', image(h, w), ds, out_file=str(out))
        drawn = cv2.imread(str(out))
        assert drawn.shape[:2] == want and min(drawn.shape[:2]) >= min(512, h)
    # nearest neighbour: each pixel a block, blended as the pixel itself (far from the
    # outline and the labels)
    ids = torch.from_numpy(np.where(np.arange(64)[:, None] < 32, 2, 3).repeat(64, 1))[None]
    small = visualizer('pan_small', min_side=0).draw_panoptic(image(64, 64), PixelData(
        sem_seg=ids))
    big = vis.draw_panoptic(enlarge(image(64, 64), 8), PixelData(sem_seg=ids))
    for rows, cols in ((slice(56, 62), slice(2, 10)), (slice(2, 8), slice(54, 62))):
        assert (big[rows.start * 8:rows.stop * 8:8, cols.start * 8:cols.stop * 8:8]
                == small[rows, cols]).all()


def test_the_prediction_decides_the_drawing(monkeypatch):
    """Panoptic > instance masks > the visualizer's own drawing; the ground truth drawn the
    same way where it can be."""
    calls = []
    for method in ('draw_panoptic', 'draw_instance_masks', 'draw_plain'):
        original = getattr(SegLocalVisualizer, method)

        def spy(self, image, *args, _name=method, _original=original, **kwargs):
            calls.append(_name)
            return _original(self, image, *args, **kwargs)
        monkeypatch.setattr(SegLocalVisualizer, method, spy)
    vis, ids = visualizer('pan_choice'), torch.from_numpy(panoptic_map())[None]
    masks = InstanceData(masks=torch.ones(1, 32, 48, dtype=torch.bool), labels=torch.tensor([0]),
                         scores=torch.tensor([0.9]), bboxes=torch.tensor([[0., 0, 48, 32]]))
    sem = PixelData(data=torch.zeros(1, 32, 48, dtype=torch.long))
    for fields, want in [
            (dict(gt_panoptic_seg=PixelData(data=ids), pred_panoptic_seg=PixelData(sem_seg=ids),
                  pred_instances=masks, pred_sem_seg=sem), ['draw_panoptic'] * 2),
            (dict(gt_sem_seg=sem, pred_panoptic_seg=PixelData(sem_seg=ids), pred_sem_seg=sem),
             ['draw_plain', 'draw_panoptic']),
            (dict(gt_panoptic_seg=PixelData(data=ids), pred_instances=masks, pred_sem_seg=sem),
             ['draw_plain', 'draw_instance_masks']),
            (dict(gt_panoptic_seg=PixelData(data=ids), gt_sem_seg=sem, pred_sem_seg=sem),
             ['draw_plain'] * 2)]:
        calls.clear()
        vis.add_datasample('x', image(32, 48), DataSample(**fields), out_file=None)
        assert calls == want, fields.keys()


def test_tools_test_show_dir_draws_eomt_panoptic(tmp_path, monkeypatch):
    """configs/eomt/eomt_vit_shapes_semantic.py, tiny, with ``test_cfg.panoptic_on``: one
    PNG per image, the prediction drawn as panoptic segments, enlarged from 48 pixels."""
    drawn = []
    original = SampleVisualizer.draw_panoptic

    def spy(self, image, panoptic_seg):
        drawn.append(image.shape)
        return original(self, image, panoptic_seg)
    monkeypatch.setattr(SampleVisualizer, 'draw_panoptic', spy)
    config = tmp_path / 'eomt_panoptic.py'
    eomt = Path(__file__).resolve().parents[2] / 'configs' / 'eomt' / 'eomt_vit_shapes_semantic.py'
    config.write_text(f'_base_ = [{str(eomt)!r}]\n' + tiny_seg_data(tmp_path / 'data', 48, 10, 24,
                                                                      num_images=2) + """
model = dict(num_queries=4, num_things_classes=3,
             backbone=dict(arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                     feedforward_channels=64), img_size=48),
             test_cfg=dict(panoptic_on=True, object_threshold=0.0))
""")
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(load_config(str(config), {}).model)
    ckpt = tmp_path / 'eomt.pth'
    torch.save(dict(state_dict=model.state_dict(), meta={}), ckpt)
    with isolated():
        rc = load_tool('tools/test.py').main(
            [str(config), str(ckpt), '--work-dir', str(tmp_path / 'work'), '--show-dir', 'show',
             '--cfg-options', *unique_names()])
    assert rc == 0
    pngs = sorted((tmp_path / 'work').glob('*/show/*.png'))
    assert len(pngs) == 2
    s = enlarge_factor((48, 48))
    assert cv2.imread(str(pngs[0])).shape == (48 * s, 2 * 48 * s, 3)  # gt | pred, enlarged
    assert drawn == [(48 * s, 48 * s, 3)] * 2  # the predictions, as panoptic segments


@pytest.mark.parametrize('width', [1, 2])
def test_outline_inside_the_mask(width):
    from densevit.visualization.mask_drawing import outline
    mask = np.zeros((10, 10), bool)
    mask[2:8, 2:8] = True
    edge = outline(mask, width)
    assert edge.sum() == 36 - (6 - 2 * width) ** 2 and not (edge & ~mask).any()
