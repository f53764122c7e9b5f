"""A 6000x4000 image at test time (issue #7): the quickstart / tiny test pipelines resize it
to their training size, predictions come back in its own frame; a pipeline without a
Resize meets the data preprocessor's token limit, which names file, size, tokens, limit and
key. Random weights: the tiny configs are built, not trained."""
import copy
import shutil

import cv2
import mmcv
import numpy as np
import pytest
import torch
from mmengine.config import Config

from densevit.apis import inference, init_model
from densevit.models.data_preprocessors.token_limit import ImageTooLargeError
from densevit.registry import DATASETS

from tiny_checkpoints import val_images
from tiny_run import TINY_CONFIG, TINY_SEG_CONFIG, isolated, load_tool, unique_names, write_config

CONFIGS = dict(det=TINY_CONFIG, seg=TINY_SEG_CONFIG)


@pytest.fixture(scope='module')
def huge(tmp_path_factory):
    """A 6000x4000 (W x H) photo-sized PNG with a few shapes on it."""
    img = np.full((4000, 6000, 3), 90, np.uint8)
    cv2.rectangle(img, (600, 500), (2600, 2500), (20, 200, 40), -1)
    cv2.circle(img, (4500, 2800), 900, (200, 40, 30), -1)
    path = tmp_path_factory.mktemp('huge') / 'photo_6000x4000.png'
    cv2.imwrite(str(path), img)
    return path, img


def without_resize(kind):
    """The tiny config with the Resize taken out of its test pipeline (a user's config)."""
    cfg = Config.fromfile(str(CONFIGS[kind]))
    for split in ('val_dataloader', 'test_dataloader'):
        dataset = cfg[split].dataset
        dataset.pipeline = [s for s in dataset.pipeline if s['type'] != 'Resize']
    return cfg


def test_a_huge_detection_image_is_resized_and_boxes_come_back_in_its_frame(huge):
    path, img = huge
    torch.manual_seed(0)
    model = init_model(TINY_CONFIG)
    got = inference(model, path)
    assert got.img_shape == (32, 48) and got.ori_shape == (4000, 6000)  # the training size
    # the same image resized by hand, predicted as a 48x32 image of its own
    small = mmcv.imresize(img, (48, 32))
    ref = inference(model, small).pred_instances
    sx, sy = got.scale_factor
    boxes = ref.bboxes / torch.tensor([sx, sy, sx, sy])
    boxes = torch.minimum(boxes, torch.tensor([6000., 4000., 6000., 4000.]))
    torch.testing.assert_close(got.pred_instances.bboxes, boxes)
    torch.testing.assert_close(got.pred_instances.scores, ref.scores)
    assert got.pred_instances.bboxes[:, 2:].max() > 48  # pixels of the original image


def test_a_large_segmentation_image_is_resized_and_predicted_at_its_own_size(tmp_path):
    img = np.random.default_rng(0).integers(0, 256, (400, 600, 3), dtype=np.uint8)
    path = tmp_path / 'wide.png'
    cv2.imwrite(str(path), img)
    torch.manual_seed(0)
    got = inference(init_model(TINY_SEG_CONFIG), path)
    assert got.img_shape == (32, 48) and got.ori_shape == (400, 600)
    assert got.pred_sem_seg.data.shape == (1, 400, 600)
    assert got.seg_logits.data.shape[1:] == (400, 600)


@pytest.mark.parametrize('kind,tokens,patch', [('det', '375,000', 8), ('seg', '93,750', 16)])
def test_without_a_resize_the_token_limit_names_file_size_tokens_and_key(huge, kind, tokens,
                                                                       patch):
    path, _ = huge
    model = init_model(without_resize(kind))
    with pytest.raises(ImageTooLargeError) as info:
        inference(model, path)
    message = str(info.value)
    assert '\n' not in message, message
    for part in (f'image {path} is 6000x4000 pixels (WxH)',
                 f'{tokens} tokens of {patch}x{patch} pixels', 'over the limit of 65,536',
                 '--cfg-options model.data_preprocessor.max_tokens=N (None: no limit)'):
        assert part in message, message


def test_the_token_limit_is_a_config_key(tmp_path):
    img = np.zeros((300, 400, 3), np.uint8)  # 38 x 50 patches of 8: 1,900 tokens
    path = tmp_path / 'mid.png'
    cv2.imwrite(str(path), img)
    cfg = without_resize('det')
    limited = init_model(cfg, cfg_options={'model.data_preprocessor.max_tokens': 1000})
    with pytest.raises(ImageTooLargeError, match=r'1,900 tokens of 8x8 pixels, over the limit '
                                                 r'of 1,000'):
        inference(limited, path)
    with pytest.raises(ImageTooLargeError, match=r'image \(an array, no file\) is 400x300'):
        inference(limited, img)
    unlimited = init_model(copy.deepcopy(cfg),
                           cfg_options={'model.data_preprocessor.max_tokens': None})
    assert inference(unlimited, path).img_shape == (300, 400)  # predicted unresized


def test_test_tool_stops_at_a_huge_image_with_one_line(huge, tmp_path, capsys):
    """tools/test.py on the tiny detector's validation split, one of whose images is the
    photo, through a test pipeline without a Resize: one line, exit 1, at that batch."""
    config = write_config(tmp_path, extra="""
val_dataloader = dict(dataset=dict(data_root=data_root, pipeline=[
    dict(type='LoadImage'), dict(type='LoadDetAnnotations'), dict(type='PackDetInputs')]))
test_dataloader = val_dataloader
""")
    model = init_model(config)  # the split is generated when the Runner builds it
    ckpt = tmp_path / 'random.pth'
    torch.save({'state_dict': model.state_dict()}, ckpt)
    DATASETS.build(Config.fromfile(config).test_dataloader.dataset)  # writes the 5 images
    photo = val_images(dict(data_root=tmp_path / 'shapes'))[2]
    shutil.copyfile(huge[0], photo)
    with isolated():
        rc = load_tool('tools/test.py').main(
            [config, str(ckpt), '--work-dir', str(tmp_path / 'w'), '--cfg-options',
             *unique_names()])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith('densevit: ')]
    assert rc == 1 and len(lines) == 1 and 'Traceback' not in err, err
    assert lines[0].startswith(f'densevit: image {photo} is 6000x4000 pixels (WxH)'), err
    assert '375,000 tokens of 8x8 pixels, over the limit of 65,536' in lines[0]
