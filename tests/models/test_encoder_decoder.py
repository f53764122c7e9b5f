"""EncoderDecoder: whole vs slide inference, window grid, flip / padding undo, losses."""
import weakref

import pytest
import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData
from torch import nn

from densevit.models.segmentors import sliding_window
from densevit.models.segmentors.sliding_window import slide_logits, sliding_windows, window_starts
from densevit.registry import MODELS
from densevit.structures import DataSample


@MODELS.register_module(name='_PixelHead', force=True)
class PixelHead(BaseModule):
    """Tiny head: a 1x1 conv on one map (stands in for any decode head in these tests)."""

    def __init__(self, in_channels, num_classes, in_index=-1, align_corners=False,
                 loss_weight=1.0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, num_classes, 1)
        self.in_index, self.num_classes = in_index, num_classes
        self.align_corners, self.loss_weight = align_corners, loss_weight

    def forward(self, inputs):
        return self.conv(inputs[self.in_index])

    def predict(self, inputs, batch_img_metas, test_cfg=None):
        return self.forward(inputs)

    def loss(self, inputs, data_samples):
        label = torch.stack([ds.gt_sem_seg.data for ds in data_samples]).squeeze(1)
        logits = F.interpolate(self.forward(inputs), size=label.shape[-2:], mode='bilinear')
        return dict(loss_ce=self.loss_weight * F.cross_entropy(logits, label, ignore_index=255),
                    acc_seg=torch.tensor(0.))


@MODELS.register_module(name='_IdentityBackbone', force=True)
class IdentityBackbone(BaseModule):
    """Returns the image itself (and a 2x downsampled copy): position-exact outputs."""

    def forward(self, x):
        return (x, F.avg_pool2d(x, 2))


def build(test_cfg=None, aux=None, backbone=None, **head):
    with DefaultScope.overwrite_default_scope('densevit'):
        return MODELS.build(dict(
            type='EncoderDecoder',
            data_preprocessor=dict(type='SegDataPreprocessor', mean=[0, 0, 0], std=[1, 1, 1]),
            backbone=backbone or dict(type='_IdentityBackbone'),
            decode_head=dict(dict(type='_PixelHead', in_channels=3, num_classes=4, in_index=0),
                             **head),
            auxiliary_head=aux, test_cfg=test_cfg))


def test_window_grid_hand_checked():
    # the 512x2048 image / 512 crop / 341 stride of SETR, scaled down: 10x25, crop 4, stride 3
    assert window_starts(10, 4, 3) == [0, 3, 6]  # (10 - 4 + 2) // 3 + 1 = 3; 6 + 4 = 10
    assert window_starts(25, 4, 3) == [0, 3, 6, 9, 12, 15, 18, 21]  # 23 // 3 + 1 = 8
    assert window_starts(512, 512, 341) == [0]
    assert window_starts(2048, 512, 341) == [0, 341, 682, 1023, 1364, 1536]  # last shifted back
    assert window_starts(3, 4, 3) == [0]  # crop larger than the image: one window, the image
    windows = sliding_windows(10, 25, (4, 4), (3, 3))
    assert len(windows) == 3 * 8
    assert windows[0] == (0, 4, 0, 4) and windows[-1] == (6, 10, 21, 25)
    assert all(y1 - y0 == 4 and x1 - x0 == 4 for y0, y1, x0, x1 in windows)
    with pytest.raises(ValueError, match='stride <= crop_size'):
        sliding_windows(10, 10, (4, 4), (5, 3))


@pytest.mark.parametrize('batch_windows', [1, 5, 100])
def test_slide_logits_divides_by_overlap_count(batch_windows):
    inputs = torch.zeros(2, 1, 10, 25)
    # every window predicts 1 everywhere -> the average must be exactly 1
    ones = slide_logits(lambda x: torch.ones(len(x), 3, *x.shape[-2:]), inputs, (4, 4), (3, 3),
                        batch_windows)
    assert ones.shape == (2, 3, 10, 25) and torch.equal(ones, torch.ones_like(ones))
    # a window-local x coordinate: pixels covered twice average two windows' values
    def local_x(x):
        return torch.arange(x.shape[-1], dtype=torch.float).expand(len(x), 1, *x.shape[-2:])
    out = slide_logits(local_x, inputs, (4, 4), (3, 3), batch_windows)[0, 0, 0]
    # x=3 is column 3 of window 0 and column 0 of window 1: (3 + 0) / 2; x=21..24 are
    # covered by the shifted-back last window (local 0..3) and the previous (local 3..) at x=21
    assert out[:3].tolist() == [0, 1, 2]
    assert out[3].item() == 1.5 and out[24].item() == 3
    assert out[21].item() == (3 + 0) / 2


@pytest.mark.parametrize('batch_windows', [1, 5])
def test_slide_logits_frees_each_window_group_before_the_next(batch_windows, monkeypatch):
    # memory must not grow with the window count: when a group's forward runs, nothing
    # of earlier groups (crops, raw or resized logits) may still be referenced
    earlier, batches = [], []
    interpolate = F.interpolate

    def tracked_interpolate(*args, **kwargs):
        out = interpolate(*args, **kwargs)
        earlier.append(weakref.ref(out))
        return out

    def predict(crops):
        assert all(ref() is None for ref in earlier), 'an earlier window group is still held'
        batches.append(len(crops))
        out = torch.ones(len(crops), 3, crops.shape[-2] // 2, crops.shape[-1] // 2)
        earlier.extend([weakref.ref(crops), weakref.ref(out)])
        return out

    monkeypatch.setattr(sliding_window.F, 'interpolate', tracked_interpolate)
    result = slide_logits(predict, torch.zeros(2, 1, 10, 25), (4, 4), (3, 3), batch_windows)
    full, rest = divmod(24, batch_windows)  # 3 x 8 windows, each with both images
    assert batches == [2 * batch_windows] * full + ([2 * rest] if rest else [])
    assert torch.equal(result, torch.ones(2, 3, 10, 25))


def test_slide_runs_the_backbone_once_per_window_group():
    model = build(dict(mode='slide', crop_size=(4, 4), stride=(3, 3), batch_windows=3)).eval()
    shapes = []
    model.backbone.register_forward_pre_hook(lambda m, args: shapes.append(args[0].shape))
    with torch.no_grad():
        model.inference(torch.randn(2, 3, 10, 25), None)
    assert shapes == [(6, 3, 4, 4)] * 8  # 24 windows, 3 per call, both images each


def test_slide_with_crop_equal_to_image_equals_whole():
    torch.manual_seed(0)
    backbone = dict(type='VisionTransformer', img_size=16, patch_size=4, with_cls_token=False,
                    arch=dict(embed_dims=8, num_layers=1, num_heads=2, feedforward_channels=16))
    whole = build(backbone=backbone, in_channels=8).eval()
    slide = build(dict(mode='slide', crop_size=(16, 24), stride=(8, 8)), backbone=backbone,
                  in_channels=8).eval()
    slide.load_state_dict(whole.state_dict())
    x = torch.randn(2, 3, 16, 24)
    assert torch.allclose(whole.inference(x, None), slide.inference(x, None), atol=1e-6)


def test_slide_on_position_exact_model_equals_whole():
    # a per-pixel model gives the same logits in any window: averaging must not change them
    model = build(dict(mode='slide', crop_size=(4, 4), stride=(3, 3), batch_windows=3)).eval()
    whole = build().eval()
    whole.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 10, 25)
    assert torch.allclose(model.inference(x, None), whole.inference(x, None), atol=1e-5)


def sample(img_shape, ori_shape=None, **meta):
    return DataSample(metainfo=dict(img_shape=img_shape, ori_shape=ori_shape or img_shape, **meta))


def test_predict_strips_padding_undoes_flip_and_resizes():
    model = build().eval()
    with torch.no_grad():
        model.decode_head.conv.weight.zero_()
        model.decode_head.conv.weight[:, 0, 0, 0] = torch.tensor([1., -1., 0., 0.])
        model.decode_head.conv.bias.copy_(torch.tensor([0., 0.5, 0., 0.]))
    img = torch.zeros(1, 3, 8, 10)
    img[0, 0, :6, 5:7] = 1.   # right part of a 6x7 image (class 0 there, class 1 elsewhere)
    img[0, 0, 6:, :] = 5.     # padding rows: must not leak into the prediction
    flipped = sample((6, 7), flip=True, flip_direction='horizontal')
    plain = sample((6, 7), ori_shape=(12, 14))
    out = model.predict(img.expand(2, 3, 8, 10), [flipped, plain])
    pred = out[0].pred_sem_seg.data[0]
    assert pred.shape == (6, 7) and out[0].seg_logits.data.shape == (4, 6, 7)
    assert (pred[:, :2] == 0).all() and (pred[:, 2:] == 1).all()  # flipped back to the left
    big = out[1].pred_sem_seg.data[0]
    assert big.shape == (12, 14) and (big[:, :9] == 1).all() and (big[:, 11:] == 0).all()
    assert out[1].pred_sem_seg.data.dtype == torch.int64


def test_predict_vertical_and_diagonal_flip():
    model = build().eval()
    logits = torch.arange(12.).reshape(1, 3, 4).expand(4, 3, 4)
    for direction, dims in (('vertical', [1]), ('diagonal', [1, 2]), ('horizontal', [2])):
        restored = model.restore(logits, dict(img_shape=(3, 4), ori_shape=(3, 4), flip=True,
                                              flip_direction=direction))
        assert torch.equal(restored, logits.flip(dims))


def test_losses_are_prefixed_and_aux_heads_listed():
    model = build(aux=[dict(type='_PixelHead', in_channels=3, num_classes=4, in_index=1,
                            loss_weight=0.4)] * 2)
    data_samples = [DataSample(gt_sem_seg=PixelData(data=torch.randint(0, 4, (1, 8, 8))))
                    for _ in range(2)]
    losses = model(torch.randn(2, 3, 8, 8), data_samples, mode='loss')
    assert set(losses) == {'decode.loss_ce', 'decode.acc_seg', 'aux_0.loss_ce', 'aux_0.acc_seg',
                           'aux_1.loss_ce', 'aux_1.acc_seg'}
    single = build(aux=dict(type='_PixelHead', in_channels=3, num_classes=4, in_index=1))
    assert 'aux_0.loss_ce' in single(torch.randn(2, 3, 8, 8), data_samples, mode='loss')


def test_tensor_mode_and_bad_configs():
    model = build()
    assert model(torch.randn(2, 3, 8, 8), mode='tensor').shape == (2, 4, 8, 8)
    out = model(torch.randn(1, 3, 8, 8), mode='predict')  # no data samples: no padding
    assert out[0].pred_sem_seg.data.shape == (1, 8, 8)
    with pytest.raises(ValueError, match="mode must be 'loss'"):
        model(torch.randn(1, 3, 8, 8), mode='bogus')
    with pytest.raises(ValueError, match="'whole' or 'slide'"):
        build(dict(mode='sliding'))
    with pytest.raises(ValueError, match='test_cfg.stride'):
        build(dict(mode='slide', crop_size=(4, 4)))
