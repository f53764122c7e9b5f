"""densevit.apis: init_model + inference on paths, arrays and lists, for both tasks."""

import cv2
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope

import densevit  # noqa: F401
from densevit.apis import inference, init_model
from densevit.registry import DATASETS
from densevit.structures import DataSample

from tiny_checkpoints import val_images


def test_detector_on_path_array_and_list(det):
    model = init_model(det['config'], det['ckpt'])
    assert not model.training and model.dataset_meta['classes'] == (
        'circle', 'rectangle', 'triangle')
    paths = val_images(det)
    one = inference(model, paths[0])
    assert isinstance(one, DataSample)
    pred = one.pred_instances
    n = len(pred.scores)
    assert pred.bboxes.shape == (n, 4) and pred.labels.shape == (n,)
    # an array in cv2's BGR order gives the same as the file
    from_array = inference(model, cv2.imread(str(paths[0])))
    torch.testing.assert_close(from_array.pred_instances.bboxes, pred.bboxes)
    several = inference(model, [str(p) for p in paths[:3]], batch_size=2)
    assert isinstance(several, list) and len(several) == 3
    torch.testing.assert_close(several[0].pred_instances.scores, pred.scores)


def test_detector_inference_matches_the_test_pipeline(det):
    """Same predictions as the model fed by the dataset's own test pipeline (tools/test.py)."""
    model = init_model(det['config'], det['ckpt'])
    cfg = Config.fromfile(det['config'])
    init_default_scope('densevit')
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    item = dataset[2]
    with torch.no_grad():
        (expected,) = model.test_step(pseudo_collate([item]))
    got = inference(model, item['data_samples'].img_path)
    torch.testing.assert_close(got.pred_instances.bboxes, expected.pred_instances.bboxes)
    torch.testing.assert_close(got.pred_instances.scores, expected.pred_instances.scores)


def test_segmentor_prediction_and_sync_bn_reverted(seg, tmp_path):
    # a config with SyncBN still builds and runs in one process: it becomes plain BN
    sync = tmp_path / 'sync_bn.py'
    sync.write_text(f"_base_ = [{seg['config']!r}]\n"
                    "model = dict(decode_head=dict(norm_cfg=dict(type='SyncBN')))\n")
    model = init_model(sync, seg['ckpt'])
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    path = val_images(seg)[0]
    result = inference(model, path)
    h, w = cv2.imread(str(path)).shape[:2]
    assert result.pred_sem_seg.data.shape == (1, h, w)
    assert int(result.pred_sem_seg.data.max()) < len(model.dataset_meta['classes'])
    same = inference(init_model(seg['config'], seg['ckpt']), cv2.imread(str(path)))
    assert torch.equal(same.pred_sem_seg.data, result.pred_sem_seg.data)


def test_init_model_without_checkpoint_and_with_options(det):
    model = init_model(det['config'], cfg_options={'model.bbox_head.num_queries': 3})
    (pred,) = inference(model, [val_images(det)[0]])
    assert len(pred.pred_instances.scores) <= 3
