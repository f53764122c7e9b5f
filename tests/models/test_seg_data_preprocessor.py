"""SegDataPreprocessor: normalisation, image padding with pad_val, label padding with 255."""
import pytest
import torch
from mmengine.structures import PixelData

from densevit.models.data_preprocessors.seg_data_preprocessor import SegDataPreprocessor
from densevit.structures import DataSample


def batch(shapes, labels=True):
    inputs = [torch.full((3, h, w), 10, dtype=torch.uint8) for h, w in shapes]
    samples = [DataSample(metainfo=dict(img_shape=(h, w), img_path=f'{i}.png'))
               for i, (h, w) in enumerate(shapes)]
    if labels:
        for s, (h, w) in zip(samples, shapes, strict=True):
            s.gt_sem_seg = PixelData(data=torch.ones(1, h, w, dtype=torch.long))
    return dict(inputs=inputs, data_samples=samples)


def test_training_pads_to_size_and_labels_with_255():
    pre = SegDataPreprocessor(mean=[10, 10, 10], std=[2, 2, 2], size=(8, 12), pad_val=-7)
    out = pre(batch([(5, 6), (7, 4)]), training=True)
    x = out['inputs']
    assert x.shape == (2, 3, 8, 12) and x.dtype == torch.float32
    assert (x[0, :, :5, :6] == 0).all()  # (10 - 10) / 2
    assert (x[0, :, 5:] == -7).all() and (x[0, :, :, 6:] == -7).all()
    for ds, (h, w) in zip(out['data_samples'], [(5, 6), (7, 4)], strict=True):
        seg = ds.gt_sem_seg.data
        assert seg.shape == (1, 8, 12)
        assert (seg[:, :h, :w] == 1).all()
        assert (seg[:, h:] == 255).all() and (seg[:, :, w:] == 255).all()
        assert ds.batch_input_shape == (8, 12) and ds.pad_shape == (8, 12)
        assert ds.img_shape == (h, w)


def test_size_divisor_and_images_larger_than_size():
    pre = SegDataPreprocessor(size=(4, 4), size_divisor=8, seg_pad_val=200)
    out = pre(batch([(9, 3), (2, 2)]), training=True)
    assert out['inputs'].shape == (2, 3, 16, 8)
    assert (out['data_samples'][1].gt_sem_seg.data[:, 2:] == 200).all()


def test_outside_training_labels_stay_unpadded():
    pre = SegDataPreprocessor(mean=[0, 0, 0], std=[1, 1, 1], bgr_to_rgb=True, size=(16, 16),
                              size_divisor=4)
    data = batch([(5, 6), (7, 3)])
    data['inputs'][0][0] = 1  # B of BGR becomes the last channel
    out = pre(data, training=False)
    assert out['inputs'].shape == (2, 3, 8, 8)  # batch max rounded to 4; `size` is for training
    assert (out['inputs'][0, 2, :5, :6] == 1).all() and (out['inputs'][0, 0, :5, :6] == 10).all()
    assert out['data_samples'][0].gt_sem_seg.shape == (5, 6)
    assert out['data_samples'][0].batch_input_shape == (8, 8)


def test_label_not_matching_its_image_is_named():
    data = batch([(5, 6)])
    data['data_samples'][0].gt_sem_seg = PixelData(data=torch.zeros(1, 4, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r'its image 0.png is \(5, 6\)'):
        SegDataPreprocessor()(data, training=True)
