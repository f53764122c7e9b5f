"""The MAE / masked-patch-prediction recipes: the paper's numbers, and quickstarts whose encoder
is the detection quickstart's ViT."""
import math
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import PARAM_SCHEDULERS, DefaultScope

from densevit.registry import MODELS

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'


def load(name):
    return Config.fromfile(str(CONFIGS / name))


def meta_model(cfg):
    with DefaultScope.overwrite_default_scope('densevit'), torch.device('meta'):
        return MODELS.build(cfg)


@pytest.mark.parametrize('epochs', [800, 1600])
def test_vit_b16_recipe_is_the_papers(epochs):
    cfg = load(f'mae/mae_vit-b16_{epochs}e.py')
    m = cfg.model
    assert (m.type, m.mask_ratio, m.head.norm_pix, m.xavier_init) == ('MAE', 0.75, True, True)
    assert (m.backbone.arch, m.backbone.patch_size, m.backbone.img_size) == ('B', 16, 224)
    assert (m.neck.embed_dims, m.neck.num_layers, m.neck.num_heads) == (512, 8, 16)
    opt = cfg.optim_wrapper.optimizer
    assert opt.type == 'AdamW' and opt.betas == (0.9, 0.95) and opt.weight_decay == 0.05
    assert opt.lr == pytest.approx(1.5e-4 * 4096 / 256)
    assert cfg.train_dataloader.batch_size * 64 == cfg.auto_scale_lr.base_batch_size == 4096
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end) == ('LinearLR', 40)
    assert (cosine.type, cosine.begin, cosine.end, cosine.eta_min) == (
        'CosineAnnealingLR', 40, epochs, 0.0)
    assert cfg.train_cfg.max_epochs == epochs and 'val_dataloader' not in cfg
    assert cfg.randomness.diff_rank_seed  # each process its own masks
    crop = cfg.train_pipeline[1]
    assert (crop.type, crop.size, crop.scale) == ('RandomResizedCrop', 224, (0.2, 1.0))
    assert [s.type for s in cfg.train_pipeline] == ['LoadImage', 'RandomResizedCrop',
                                                    'RandomFlip', 'PackDetInputs']


@pytest.mark.parametrize('name', ['mae_vit_shapes_quickstart.py', 'mpp_vit_shapes_quickstart.py'])
def test_quickstart_encoder_is_the_detection_quickstarts_vit(name):
    cfg = load(f'mae/{name}')
    det = load('quickstart/deformable_detr_vit_shapes.py')
    assert cfg.model.backbone == det.model.backbone
    encoder = {k[len('backbone.'):]: v.shape for k, v in meta_model(cfg.model).state_dict().items()
               if k.startswith('backbone.')}
    detector = {k[len('backbone.'):]: v.shape
                for k, v in meta_model(det.model).state_dict().items() if k.startswith('backbone.')}
    assert encoder == detector
    # the same shapes arguments: the same images under data/shapes/
    for split in ('train', 'val'):
        ours = cfg[f'{split}_dataloader'].dataset
        theirs = det[f'{split}_dataloader'].dataset
        assert ours.generate == theirs.generate and ours.data_root == theirs.data_root
        assert ours.data_prefix.img_path == theirs.data_prefix.img


@pytest.mark.parametrize('name', ['mae_vit_shapes_quickstart.py', 'mae_vit_shapes_10k.py'])
def test_shapes_schedule_decays_to_its_last_iteration(name):
    cfg = load(f'mae/{name}')
    warmup, cosine = cfg.param_scheduler
    # the learning rate mmengine's schedulers give, step by step, against the closed-form
    # cosine from the warm-up's end to zero at the run's last iteration
    base, n, w = cfg.optim_wrapper.optimizer.lr, cfg.train_cfg.max_iters, warmup.end
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base)
    scheds = [PARAM_SCHEDULERS.build(dict(s, optimizer=opt)) for s in cfg.param_scheduler]
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]['lr'])
        for s in scheds:
            s.step()
    for t in (w, w + (n - w) // 3, (n + w) // 2, n - 1):
        expected = base * 0.5 * (1 + math.cos(math.pi * (t - w) / (n - w)))
        assert lrs[t] == pytest.approx(expected, rel=1e-6, abs=1e-12), t
    assert 0 < lrs[n - 1] < base * 1e-6  # the last iteration trains at almost zero


def test_10k_schedule_is_the_quickstart_only_longer():
    """mae_vit_shapes_10k.py differs from the quickstart in its schedule (iterations,
    validation and checkpoint intervals, the cosine's end) and nothing else: the same model,
    data, optimizer and warm-up."""
    long, quick = (load(f'mae/{n}').to_dict() for n in ('mae_vit_shapes_10k.py',
                                                       'mae_vit_shapes_quickstart.py'))
    differ = sorted(k for k in {*long, *quick} if long.get(k) != quick.get(k))
    assert differ == ['default_hooks', 'max_iters', 'param_scheduler', 'train_cfg']
    assert (long['max_iters'], quick['max_iters']) == (10000, 4000)
    assert (long['train_cfg']['val_interval'], quick['train_cfg']['val_interval']) == (1000, 500)
    assert long['param_scheduler'][0] == quick['param_scheduler'][0]  # the warm-up
    assert (long['param_scheduler'][1]['end'], quick['param_scheduler'][1]['end']) == (10000, 4000)
    hooks = {k for k in {*long['default_hooks'], *quick['default_hooks']}
             if long['default_hooks'].get(k) != quick['default_hooks'].get(k)}
    assert hooks == {'checkpoint'}


def test_mpp_quickstart_is_the_papers_objective():
    m = load('mae/mpp_vit_shapes_quickstart.py').model
    assert (m.type, m.mask_ratio, m.replace_probs, m.head.bits) == (
        'MaskedPatchPrediction', 0.5, (0.8, 0.1, 0.1), 3)
