"""Arrays that inference() takes or refuses, as documented, and a folder,
refused saying how to run one."""

import cv2
import numpy as np
import pytest
import torch

from densevit.apis import inference, init_model

from tiny_checkpoints import val_images
from tiny_run import TINY_CONFIG


def test_gray_bgra_and_float_arrays(det):
    """H x W and H x W x 1 gray, BGRA and float 0..1 give what the equivalent BGR uint8
    image gives; float values outside 0..1 and other shapes are refused, naming them."""
    model = init_model(det['config'], det['ckpt'])
    bgr = cv2.imread(str(val_images(det, 1)[0]))
    gray = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    expected = inference(model, np.repeat(gray[..., None], 3, axis=2)).pred_instances
    for img in (gray, gray[..., None], gray.astype(np.float32) / 255):
        got = inference(model, img).pred_instances
        torch.testing.assert_close(got.bboxes, expected.bboxes)
        torch.testing.assert_close(got.scores, expected.scores)
    bgra = np.concatenate([bgr, np.full_like(bgr[..., :1], 7)], axis=2)
    torch.testing.assert_close(inference(model, bgra).pred_instances.bboxes,
                               inference(model, bgr).pred_instances.bboxes)
    with pytest.raises(ValueError, match=r'values in 0\.\.1 \(got \d+\.\.\d+\)'):
        inference(model, bgr.astype(np.float32))
    with pytest.raises(ValueError, match=r'got shape \(2, 8, 8, 3\)'):
        inference(model, np.zeros((2, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match='got uint16'):
        inference(model, gray.astype(np.uint16))


def test_a_folder_is_refused_saying_how_to_run_one(tmp_path):
    """inference() on a folder: one line naming it, not mmengine's bare IsADirectoryError."""
    model = init_model(TINY_CONFIG)  # random weights: nothing is predicted
    folder = tmp_path / 'images'
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        inference(model, folder)
    message = str(info.value)
    assert message.startswith(f'inference: {folder} is a folder; inference() takes an image '
                              '(a file path or an array) or a list of them') and '\n' not in message
    assert f"sorted(glob.glob('{folder}/*.png'))" in message
    assert f'tools/demo.py {folder} CONFIG CHECKPOINT --out-dir OUT' in message
    with pytest.raises(IsADirectoryError, match='is a folder'):
        inference(model, [str(folder)])  # also inside a list
