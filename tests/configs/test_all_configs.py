"""Every config under configs/ (except _base_): loads, builds its model on the meta device
and names only registered types; plus the recipe checks of the COCO / ADE20K / quickstart
configs and the segmentation quickstart's train step."""
from functools import cache
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit import registry as R
from densevit.registry import MODELS
from densevit.structures import DataSample

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
ALL = sorted(p for p in CONFIGS.rglob('*.py') if '_base_' not in p.relative_to(CONFIGS).parts)
SEGFORMER = sorted((CONFIGS / 'segformer').glob('segformer_mit-*.py'))
SETR = sorted((CONFIGS / 'setr').glob('*.py'))
UPERNET = sorted((CONFIGS / 'upernet').glob('*.py'))
DINOV2 = sorted((CONFIGS / 'dinov2').glob('*.py'))
BEIT = sorted((CONFIGS / 'beit').glob('*.py'))
VITDET = sorted((CONFIGS / 'vitdet').glob('*.py'))
SEG_QUICKSTART = CONFIGS / 'quickstart' / 'segformer_shapes.py'
SEG_TRIALS = sorted((CONFIGS / 'studies' / 'seg_trials').glob('*.py'))
# the segmentation twin of the DETR-ViT quickstart and its position-embedding study
VIT_SEG = [CONFIGS / 'quickstart' / 'vit_seg_shapes.py'] + sorted(
    (CONFIGS / 'studies' / 'vit_pe_seg').glob('*.py'))


def rel(path):
    return str(path.relative_to(CONFIGS))


@cache
def load(path):
    return Config.fromfile(str(path))


def build_model(model_cfg, device=None):
    with DefaultScope.overwrite_default_scope('densevit'):
        if device is None:
            return MODELS.build(model_cfg)
        with torch.device(device):
            return MODELS.build(model_cfg)


# ---------------------------------------------------------------- every config

def test_configs_are_found():
    names = {rel(p) for p in ALL}
    assert len(ALL) >= 45 and not any(n.startswith('_base_') for n in names)
    for expected in ('detr_vit.py', 'quickstart/segformer_shapes.py',
                     'deformable_detr/deformable_detr_r50_16xb2-50e_coco.py',
                     'studies/vit_pe/detr_vit_shapes_pe-none.py',
                     'quickstart/vit_seg_shapes.py', 'studies/vit_pe_seg/vit_seg_shapes_pe-none.py',
                     'studies/seg_trials/previous.py', 'analysis/vit-b16_224.py'):
        assert expected in names


def registered_types(cfg):
    """(where, registry, type) for every ``type`` outside the model that the Runner builds."""
    found = []

    def walk(obj, where, registry):
        # every dict with a type in a pipeline is a transform (RandomChoice nests them)
        if isinstance(obj, dict):
            if 'type' in obj and isinstance(obj['type'], str):
                found.append((where, registry, obj['type']))
            for k, v in obj.items():
                if k != 'type':
                    walk(v, f'{where}.{k}', registry)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f'{where}[{i}]', registry)

    def one(obj, where, registry):
        if isinstance(obj, dict) and isinstance(obj.get('type'), str):
            found.append((where, registry, obj['type']))

    for split in ('train', 'val', 'test'):
        walk(cfg.get(f'{split}_pipeline'), f'{split}_pipeline', R.TRANSFORMS)
        loader = cfg.get(f'{split}_dataloader')
        if loader:
            name = f'{split}_dataloader'
            one(loader.get('sampler'), f'{name}.sampler', R.DATA_SAMPLERS)
            one(loader.get('batch_sampler'), f'{name}.batch_sampler', R.DATA_SAMPLERS)
            dataset = loader.get('dataset')
            one(dataset, f'{name}.dataset', R.DATASETS)
            walk(dataset.get('pipeline'), f'{name}.dataset.pipeline', R.TRANSFORMS)
        evaluator = cfg.get(f'{split}_evaluator')
        for i, metric in enumerate(evaluator if isinstance(evaluator, list) else [evaluator]):
            one(metric, f'{split}_evaluator[{i}]', R.METRICS)
        one(cfg.get(f'{split}_cfg'), f'{split}_cfg', R.LOOPS)
    optim = cfg.get('optim_wrapper')
    if optim:
        one(optim, 'optim_wrapper', R.OPTIM_WRAPPERS)
        one(optim.get('optimizer'), 'optim_wrapper.optimizer', R.OPTIMIZERS)
        if 'constructor' in optim:
            found.append(('optim_wrapper.constructor', R.OPTIM_WRAPPER_CONSTRUCTORS,
                          optim.constructor))
    schedulers = cfg.get('param_scheduler') or []
    for i, s in enumerate(schedulers if isinstance(schedulers, list) else [schedulers]):
        one(s, f'param_scheduler[{i}]', R.PARAM_SCHEDULERS)
    for name, hook in (cfg.get('default_hooks') or {}).items():
        one(hook, f'default_hooks.{name}', R.HOOKS)
    for i, hook in enumerate(cfg.get('custom_hooks') or []):
        one(hook, f'custom_hooks[{i}]', R.HOOKS)
    one(cfg.get('visualizer'), 'visualizer', R.VISUALIZERS)
    for i, backend in enumerate((cfg.get('visualizer') or {}).get('vis_backends') or []):
        one(backend, f'visualizer.vis_backends[{i}]', R.VISBACKENDS)
    one(cfg.get('log_processor'), 'log_processor', R.LOG_PROCESSORS)
    return found


def unresolved(cfg):
    with DefaultScope.overwrite_default_scope('densevit'):
        return [f'{where}: {registry.name} has no {t!r}'
                for where, registry, t in registered_types(cfg) if registry.get(t) is None]


@pytest.mark.parametrize('path', ALL, ids=rel)
def test_config_builds_on_meta_with_registered_types(path):
    cfg = load(path)
    assert cfg.get('default_scope') == 'densevit'
    model = build_model(cfg.model, device='meta')
    assert sum(p.numel() for p in model.parameters()) > 0
    assert unresolved(cfg) == []
    if 'train_dataloader' in cfg:  # a trainable recipe: data, loops, optimizer, schedule
        types = {where.split('[')[0].split('.')[0] for where, _, _ in registered_types(cfg)}
        assert {'train_pipeline', 'train_dataloader', 'train_cfg',
                'optim_wrapper', 'param_scheduler', 'default_hooks'} <= types
        # a recipe without validation (MAE pre-training as the paper) has none of its parts
        assert 'val_evaluator' in types or not ({'val_dataloader', 'val_cfg'} & set(cfg))


def test_a_typo_or_a_broken_base_fails(tmp_path):
    """The checks above catch a misspelt type anywhere they look, and a wrong _base_ path."""
    cfg = Config.fromfile(str(CONFIGS / 'quickstart' / 'detr_vit_shapes.py'))
    cfg.train_pipeline = [dict(type='LoadImage'), dict(type='RandomFlipp', prob=0.5)]
    cfg.param_scheduler = [dict(type='LinearLRR')]
    cfg.default_hooks = dict(cfg.default_hooks, logger=dict(type='LogerHook'))
    assert unresolved(cfg) == ["train_pipeline[1]: transform has no 'RandomFlipp'",
                               "param_scheduler[0]: parameter scheduler has no 'LinearLRR'",
                               "default_hooks.logger: hook has no 'LogerHook'"]
    cfg = Config.fromfile(str(CONFIGS / 'detr_vit.py'))
    cfg.model.backbone.type = 'VisionTransformr'
    with pytest.raises(KeyError, match='VisionTransformr'):
        build_model(cfg.model, device='meta')
    broken = tmp_path / 'broken.py'
    broken.write_text(f"_base_ = ['{CONFIGS}/_base_/models/detr_typo.py']\n")
    with pytest.raises(FileNotFoundError):
        Config.fromfile(str(broken))


# ---------------------------------------------------------------- detection recipes

# each recipe's backbone and the ImageNet file its init_cfg loads (the config comments say
# where to download it)
DETR_COCO = {'detr_resnet50.py': ('ResNet', 'checkpoints/resnet50-0676ba61.pth'),
             'detr_swin-t.py': ('SwinTransformer', 'checkpoints/swin_tiny_patch4_window7_224.pth')}


@pytest.mark.parametrize('name', DETR_COCO)
def test_detr_coco_recipe(name):
    cfg = load(CONFIGS / name)
    head = cfg.model.bbox_head
    assert cfg.model.type == 'DETR' and head.type == 'DETRHead'
    assert (head.num_classes, head.embed_dims, head.num_queries, head.aux_loss) == (
        80, 256, 100, True)
    assert head.transformer == dict(num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                                    feedforward_channels=2048, dropout=0.1)
    assert head.positional_encoding.num_feats == 128
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=1e-4, weight_decay=1e-4)
    assert cfg.train_cfg.max_epochs == 300 and cfg.param_scheduler[0].milestones == [200]
    backbone = cfg.model.backbone
    assert (backbone.type, backbone.init_cfg.type, backbone.init_cfg.checkpoint) == (
        DETR_COCO[name][0], 'Pretrained', DETR_COCO[name][1])


@pytest.mark.parametrize('name,checkpoint,mean,std', [
    ('detr_vit.py', 'checkpoints/vit_base_patch16_224.augreg2_in21k_ft_in1k.safetensors',
     [127.5] * 3, [127.5] * 3),
    ('detr_vit_mae.py', 'checkpoints/mae_pretrain_vit_base.pth',
     [123.675, 116.28, 103.53], [58.395, 57.12, 57.375])])
def test_detr_vit_is_a_recipe(name, checkpoint, mean, std):
    """The headline's COCO recipe: named weights with their own normalisation, layer-wise lr
    decay, no weight decay on position table / class token / norms, Plain-DETR's options,
    at most 50 epochs, and the expected AP stated as not measured."""
    from mmengine.optim import build_optim_wrapper
    cfg = load(CONFIGS / name)
    assert cfg.model.backbone.init_cfg.checkpoint == checkpoint
    pre = cfg.model.data_preprocessor
    assert (pre.mean, pre.std) == (mean, std)
    head = cfg.model.bbox_head
    assert head.type == 'PlainDETRHead' and head.as_two_stage and head.mixed_selection
    assert head.look_forward_twice and head.box_rpb.stride == cfg.model.backbone.patch_size
    assert head.one_to_many == dict(num_queries=1500, k=6, loss_weight=1.0)
    assert cfg.train_cfg.max_epochs <= 50
    assert 'expected, not measured' in (CONFIGS / 'detr_vit.py').read_text()
    model = build_model(cfg.model, device='meta')
    with DefaultScope.overwrite_default_scope('densevit'):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {names[id(p)]: g for g in wrapper.optimizer.param_groups for p in g['params']}
    first, last = [groups[f'backbone.blocks.{i}.mlp.fc1.weight'] for i in (0, 11)]
    assert first['lr'] < last['lr'] < groups['bbox_head.class_embed.0.weight']['lr']
    for no_decay in ('backbone.pos_embed.weight', 'backbone.cls_token',
                     'backbone.blocks.3.norm1.weight'):
        assert groups[no_decay]['weight_decay'] == 0, no_decay
    assert groups['bbox_head.class_embed.0.weight']['weight_decay'] == 0.05


def test_detr_quickstart_is_small():
    cfg = load(CONFIGS / 'quickstart' / 'detr_vit_shapes.py')
    head = cfg.model.bbox_head
    assert cfg.model.type == 'DETR' and head.type == 'PlainDETRHead'
    assert (head.num_classes, head.embed_dims, head.num_queries) == (3, 128, 30)
    # one single-scale map (the ViT's, through a one-level ViTDet pyramid: convolutions, no
    # resampling), global cross-attention, no deformable attention
    neck = cfg.model.neck
    assert neck.type == 'SimpleFeaturePyramid' and tuple(neck.scale_factors) == (1.0,)
    assert cfg.model.type == 'DETR' and 'transformer' not in head
    assert cfg.model.data_preprocessor.pad_size_divisor == 8
    assert head.box_rpb.stride == cfg.model.backbone.patch_size == 8
    assert cfg.train_cfg.max_iters == 1600
    vanilla = load(CONFIGS / 'quickstart' / 'detr_vit_shapes_vanilla.py')
    assert vanilla.model.bbox_head.type == 'DETRHead' and vanilla.train_cfg.max_iters == 2400


# ---------------------------------------------------------------- segmentation recipes

def test_all_segmentation_configs_are_there():
    assert [p.name for p in SEGFORMER] == [
        f'segformer_mit-b{i}_8xb2-160k_ade20k-512x512.py' for i in range(6)]
    assert [p.name for p in SETR] == [
        f'setr_vit-l16_{v}_8xb2-160k_ade20k-512x512.py' for v in ('mla', 'naive', 'pup')]


@pytest.mark.parametrize('path', SEGFORMER, ids=lambda p: p.stem)
def test_segformer_recipe(path):
    cfg = load(path)
    arch = path.stem.split('_')[1][-2:]  # b0..b5
    assert cfg.model.backbone.arch == arch
    # MMSegmentation's zoo configs: a 256-wide head with conv-BN-ReLU projections for all sizes
    assert cfg.model.decode_head.channels == 256
    assert cfg.model.decode_head.proj_type == 'conv_norm_act'
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
    cfg = load(path)
    model = cfg.model
    assert model.test_cfg == dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
    lr = 0.01 if 'naive' in path.stem else 0.001  # as mmseg's zoo configs
    assert cfg.optim_wrapper.optimizer == dict(type='SGD', lr=lr, momentum=0.9, weight_decay=0.0)
    assert cfg.optim_wrapper.paramwise_cfg.custom_keys == {'head': dict(lr_mult=10.)}
    assert cfg.param_scheduler[0].type == 'PolyLR' and cfg.train_cfg.max_iters == 160000
    assert model.backbone.arch == 'L' and model.backbone.img_size == 512
    assert model.data_preprocessor.size == (512, 512)
    # mmseg pads nothing at test time; windows at borders are padded inside the ViT
    assert 'size_divisor' not in model.data_preprocessor and model.backbone.pad_to_patch
    assert model.backbone.drop_rate == 0 and model.backbone.final_norm is False
    assert model.backbone.layer_norm_eps == 1e-6 and model.backbone.interpolate_mode == 'bilinear'
    assert model.backbone.init_cfg.checkpoint == 'checkpoints/vit-large-p16_in21k-384.pth'
    assert cfg.train_dataloader.batch_size == 2 and cfg.val_dataloader.batch_size == 1
    aux_weights = [h.loss_decode.loss_weight for h in model.auxiliary_head]
    if 'mla' in path.stem:
        assert tuple(model.backbone.out_indices) == (5, 11, 17, 23)
        assert model.backbone.with_cls_token is False and model.neck.type == 'MLANeck'
        assert model.decode_head.type == 'SETRMLAHead' and aux_weights == [0.4] * 4
        assert [h.in_index for h in model.auxiliary_head] == [0, 1, 2, 3]
        assert {(h.num_convs, h.norm_layer) for h in model.auxiliary_head} == {(0, None)}
    else:
        assert tuple(model.backbone.out_indices) == (9, 14, 19, 23)
        assert model.decode_head.in_index == 3 and aux_weights == [0.4] * 3
        assert [h.in_index for h in model.auxiliary_head] == [0, 1, 2]
        kernel = 1 if 'naive' in path.stem else 3  # mmseg's ADE20K auxiliary heads
        assert {(h.num_convs, h.up_scale, h.kernel_size) for h in model.auxiliary_head} == {
            (2, 4, kernel)}


@pytest.mark.parametrize('path', SEGFORMER + SETR + UPERNET + DINOV2 + BEIT + [SEG_QUICKSTART]
                         + SEG_TRIALS + VIT_SEG,
                         ids=lambda p: p.stem)
def test_seg_model_runs_on_meta_and_wires_up(path):
    cfg = load(path)
    model = build_model(cfg.model, device='meta')
    size = cfg.get('img_size', 512)  # the quickstart and its trials set it; ADE20K: 512
    # two images: in training a BatchNorm needs more than one value per channel, and
    # UperNet's 1-bin pyramid pooling branch has one per image
    x = torch.empty(2, 3, size, size, device='meta')
    logits = model(x, mode='tensor')
    assert logits.shape[:2] == (2, cfg.model.decode_head.num_classes)
    feats = model.extract_feat(x)
    for head in model.auxiliary_head or ():
        assert head(feats).shape[1] == cfg.model.decode_head.num_classes


def quickstart_model():
    cfg = load(SEG_QUICKSTART)
    torch.manual_seed(0)
    model = build_model(cfg.model)
    model.init_weights()
    with DefaultScope.overwrite_default_scope('densevit'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    return model, optim


def seg_batch(labels):
    inputs = [torch.randint(0, 256, (3, *lab.shape), dtype=torch.uint8) for lab in labels]
    samples = [DataSample(gt_sem_seg=PixelData(data=lab[None].long()),
                          metainfo=dict(img_shape=tuple(lab.shape), ori_shape=tuple(lab.shape)))
               for lab in labels]
    return dict(inputs=inputs, data_samples=samples)


def test_seg_quickstart_runs_a_train_step_and_predicts():
    model, optim = quickstart_model()
    before = [p.detach().clone() for p in model.parameters()]
    log = model.train_step(seg_batch([torch.randint(0, 4, (64, 64)) for _ in range(2)]), optim)
    assert torch.isfinite(log['loss']) and 'decode.acc_seg' in log
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    out = model.val_step(seg_batch([torch.randint(0, 4, (40, 56))]))
    assert out[0].pred_sem_seg.data.shape == (1, 40, 56)
    assert out[0].seg_logits.data.shape == (4, 40, 56)


def test_all_ignored_labels_train_without_nan():
    model, optim = quickstart_model()
    log = model.train_step(seg_batch([torch.full((64, 64), 255) for _ in range(2)]), optim)
    assert torch.isfinite(log['loss']) and log['loss'] == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_eomt_shapes_recipe_trains_a_step_and_predicts():
    """configs/eomt: EoMT with the mask annealing hook on the shapes class maps, a train step
    (every prediction set's losses) and semantic prediction at the original size."""
    path = CONFIGS / 'eomt' / 'eomt_vit_shapes_semantic.py'
    cfg = load(path)
    assert cfg.model.type == 'EoMT' and cfg.model.backbone.type == 'VisionTransformer'
    assert (cfg.model.num_blocks, cfg.model.num_queries) == (2, 20)
    assert dict(type='MaskAnnealingHook') in cfg.custom_hooks
    assert cfg.train_dataloader.dataset.type == 'ShapesSegDataset'
    assert 'no number measured here' in path.read_text().split('\n_base_')[0]
    torch.manual_seed(0)
    model = build_model(cfg.model)
    model.init_weights()
    with DefaultScope.overwrite_default_scope('densevit'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    assert len(model.decode_head.upscale) == 1  # 8x8 patches: masks at 24x24
    before = [p.detach().clone() for p in model.parameters()]
    log = model.train_step(seg_batch([torch.randint(0, 4, (96, 96)) for _ in range(2)]), optim)
    assert torch.isfinite(log['loss']) and {'loss_cls', 'b0.loss_mask', 'b1.loss_dice'} <= set(log)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    out = model.val_step(seg_batch([torch.randint(0, 4, (40, 56))]))
    assert out[0].pred_sem_seg.data.shape == (1, 40, 56)
    assert out[0].seg_logits.data.shape == (4, 40, 56)


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
    cfg = load(SEGFORMER[0])
    with DefaultScope.overwrite_default_scope('densevit'):
        train = DATASETS.build(dict(cfg.train_dataloader.dataset, data_root=str(tmp_path)))
        val = DATASETS.build(dict(cfg.val_dataloader.dataset, data_root=str(tmp_path)))
        pre = MODELS.build(cfg.model.data_preprocessor)
    np.random.seed(0)  # mmcv's RandomFlip draws from numpy
    samples = [train[0] for _ in range(16)]
    assert all(max(s['inputs'].shape[1:]) <= 512 for s in samples)
    # RandomFlip(prob=0.5): both outcomes among 16 draws (all alike: 2 in 65,536)
    assert {s['data_samples'].flip for s in samples} == {True, False}
    assert {s['data_samples'].flip_direction for s in samples if s['data_samples'].flip} == {
        'horizontal'}
    batch = pre(pseudo_collate([train[0], train[0]]), training=True)
    assert batch['inputs'].shape == (2, 3, 512, 512)
    assert batch['data_samples'][0].gt_sem_seg.shape == (512, 512)
    test = val[0]
    # resized to fit (2048, 512), while the label stays at the original size
    assert tuple(test['inputs'].shape[1:]) == (512, 768)
    assert test['data_samples'].gt_sem_seg.shape == (60, 90)
    assert test['data_samples'].ori_shape == (60, 90)


@pytest.mark.parametrize('name,head', [
    ('quickstart/detr_vit_shapes_dn.py', 'DETRHead'),
    ('quickstart/detr_vit_shapes_overfit16.py', 'DETRHead'),
    ('quickstart/deformable_detr_vit_shapes.py', 'DeformableDETRHead'),
    ('mae/finetune/detr_vit_shapes_mae.py', 'PlainDETRHead'),
    *[(f'studies/vit_pe/{p.name}', 'PlainDETRHead')
      for p in sorted((CONFIGS / 'studies' / 'vit_pe').glob('*.py'))]])
def test_shapes_detection_configs_have_the_parent_their_purpose_needs(name, head):
    """Vanilla-DETR variants keep vanilla DETR; the studies and MAE fine-tuning of "DETR on a
    ViT" use the quickstart that learns; each says its parent in its first lines."""
    cfg = load(CONFIGS / name)
    assert cfg.model.bbox_head.type == head
    first = (CONFIGS / name).read_text().split('\n_base_')[0]
    parent = 'detr_vit_shapes_vanilla.py' if head != 'PlainDETRHead' else 'detr_vit_shapes.py'
    assert parent in first, f'{name}: its first comment lines do not name {parent}'
