"""Segmentation configs: recipes as documented, models build (meta device) and run."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.registry import MODELS
from densevit.structures import DataSample

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
SEGFORMER = sorted((CONFIGS / 'segformer').glob('segformer_mit-*.py'))
SETR = sorted((CONFIGS / 'setr').glob('*.py'))
QUICKSTART = CONFIGS / 'quickstart' / 'segformer_shapes.py'
SEG_TRIALS = sorted((CONFIGS / 'quickstart' / 'seg_trials').glob('*.py'))


def build_model(model_cfg, device=None):
    with DefaultScope.overwrite_default_scope('densevit'):
        if device is None:
            return MODELS.build(model_cfg)
        with torch.device(device):
            return MODELS.build(model_cfg)


def test_all_segmentation_configs_are_there():
    assert [p.name for p in SEGFORMER] == [
        f'segformer_mit-b{i}_8xb2-160k_ade20k-512x512.py' for i in range(6)]
    assert [p.name for p in SETR] == [
        f'setr_vit-l16_{v}_8xb2-160k_ade20k-512x512.py' for v in ('mla', 'naive', 'pup')]


@pytest.mark.parametrize('path', SEGFORMER, ids=lambda p: p.stem)
def test_segformer_recipe(path):
    cfg = Config.fromfile(str(path))
    arch = path.stem.split('_')[1][-2:]  # b0..b5
    assert cfg.model.backbone.arch == arch
    assert cfg.model.decode_head.channels == (256 if arch in ('b0', 'b1') else 768)
    assert cfg.model.decode_head.num_classes == 150 and cfg.model.test_cfg.mode == 'whole'
    assert cfg.model.backbone.init_cfg.checkpoint == f'checkpoints/mit_{arch}.pth'
    opt = cfg.optim_wrapper
    assert opt.optimizer == dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01)
    assert opt.paramwise_cfg.custom_keys == {'pos_block': dict(decay_mult=0.),
                                             'norm': dict(decay_mult=0.),
                                             'head': dict(lr_mult=10.)}
    warmup, poly = cfg.param_scheduler
    assert (warmup.type, warmup.end, poly.type, poly.power, poly.begin, poly.end) == (
        'LinearLR', 1500, 'PolyLR', 1.0, 1500, 160000)
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2
    assert cfg.model.data_preprocessor.size == (512, 512)


@pytest.mark.parametrize('path', SETR, ids=lambda p: p.stem)
def test_setr_recipe(path):
    cfg = Config.fromfile(str(path))
    model = cfg.model
    assert model.test_cfg == dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
    assert cfg.optim_wrapper.optimizer == dict(type='SGD', lr=0.001, momentum=0.9,
                                               weight_decay=0.0)
    assert cfg.optim_wrapper.paramwise_cfg.custom_keys == {'head': dict(lr_mult=10.)}
    assert cfg.param_scheduler[0].type == 'PolyLR' and cfg.train_cfg.max_iters == 160000
    assert model.backbone.arch == 'L' and model.backbone.img_size == 512
    aux_weights = [h.loss_decode.loss_weight for h in model.auxiliary_head]
    if 'mla' in path.stem:
        assert tuple(model.backbone.out_indices) == (5, 11, 17, 23)
        assert model.backbone.with_cls_token is False and model.neck.type == 'MLANeck'
        assert model.decode_head.type == 'SETRMLAHead' and aux_weights == [0.4] * 4
    else:
        assert tuple(model.backbone.out_indices) == (9, 14, 19, 23)
        assert model.decode_head.in_index == 3 and aux_weights == [0.4] * 3
        assert [h.in_index for h in model.auxiliary_head] == [0, 1, 2]


@pytest.mark.parametrize('path', SEGFORMER + SETR + [QUICKSTART] + SEG_TRIALS,
                         ids=lambda p: p.stem)
def test_model_builds_on_meta_and_wires_up(path):
    cfg = Config.fromfile(str(path))
    model = build_model(cfg.model, device='meta')
    size = cfg.get('img_size', 512)  # the quickstart and its trials set it; ADE20K: 512
    x = torch.empty(1, 3, size, size, device='meta')
    logits = model(x, mode='tensor')
    assert logits.shape[:2] == (1, cfg.model.decode_head.num_classes)
    feats = model.extract_feat(x)
    for head in model.auxiliary_head or ():
        assert head(feats).shape[1] == cfg.model.decode_head.num_classes


def quickstart_model():
    cfg = Config.fromfile(str(QUICKSTART))
    torch.manual_seed(0)
    model = build_model(cfg.model)
    model.init_weights()
    with DefaultScope.overwrite_default_scope('densevit'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    return model, optim


def seg_batch(labels):
    inputs = [torch.randint(0, 256, (3, *l.shape), dtype=torch.uint8) for l in labels]
    samples = [DataSample(gt_sem_seg=PixelData(data=l[None].long()),
                          metainfo=dict(img_shape=tuple(l.shape), ori_shape=tuple(l.shape)))
               for l in labels]
    return dict(inputs=inputs, data_samples=samples)


def test_quickstart_runs_a_train_step_and_predicts():
    model, optim = quickstart_model()
    before = [p.detach().clone() for p in model.parameters()]
    log = model.train_step(seg_batch([torch.randint(0, 4, (64, 64)) for _ in range(2)]), optim)
    assert torch.isfinite(log['loss']) and 'decode.acc_seg' in log
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    out = model.val_step(seg_batch([torch.randint(0, 4, (40, 56))]))
    assert out[0].pred_sem_seg.data.shape == (1, 40, 56)
    assert out[0].seg_logits.data.shape == (4, 40, 56)


def test_all_ignored_labels_train_without_nan():
    model, optim = quickstart_model()
    log = model.train_step(seg_batch([torch.full((64, 64), 255) for _ in range(2)]), optim)
    assert torch.isfinite(log['loss']) and log['loss'] == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_ade20k_pipelines_run_on_a_tiny_fixture(tmp_path):
    import cv2
    import numpy as np
    from mmengine.dataset import pseudo_collate

    from densevit.registry import DATASETS
    for split in ('training', 'validation'):
        for d in ('images', 'annotations'):
            (tmp_path / d / split).mkdir(parents=True)
        rng = np.random.default_rng(0)
        cv2.imwrite(str(tmp_path / 'images' / split / 'ADE_1.jpg'),
                    rng.integers(0, 256, (60, 90, 3)).astype(np.uint8))
        cv2.imwrite(str(tmp_path / 'annotations' / split / 'ADE_1.png'),
                    rng.integers(0, 151, (60, 90)).astype(np.uint8))
    cfg = Config.fromfile(str(SEGFORMER[0]))
    with DefaultScope.overwrite_default_scope('densevit'):
        train = DATASETS.build(dict(cfg.train_dataloader.dataset, data_root=str(tmp_path)))
        val = DATASETS.build(dict(cfg.val_dataloader.dataset, data_root=str(tmp_path)))
        pre = MODELS.build(cfg.model.data_preprocessor)
    sample = train[0]
    assert max(sample['inputs'].shape[1:]) <= 512 and sample['data_samples'].flip in (True, False)
    batch = pre(pseudo_collate([train[0], train[0]]), training=True)
    assert batch['inputs'].shape == (2, 3, 512, 512)
    assert batch['data_samples'][0].gt_sem_seg.shape == (512, 512)
    test = val[0]
    # resized to fit (2048, 512), while the label stays at the original size
    assert tuple(test['inputs'].shape[1:]) == (512, 768)
    assert test['data_samples'].gt_sem_seg.shape == (60, 90)
    assert test['data_samples'].ori_shape == (60, 90)
