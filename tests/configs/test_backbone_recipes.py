"""Recipes of the backbones loaded from other frameworks (UperNet-Swin, DINOv2, BEiT, ViTDet):
each config's model, data and optimiser groups as the recipe it mirrors, built on the meta
device (every config's generic build checks are in test_all_configs.py)."""
import pytest
import torch
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from test_all_configs import BEIT, CONFIGS, DINOV2, UPERNET, VITDET, build_model, load


def test_vitdet_shapes_config_is_the_coco_model_at_512():
    """The GPU-check twin (tools/dev/gpu_check.sh): the COCO recipe's backbone options and
    pyramid on the shapes at 512 x 512, from scratch (no MAE file), four levels."""
    coco = load(CONFIGS / 'vitdet' / 'vitdet_vit-b16_sfp_deformable_detr_coco.py').model
    shapes = load(CONFIGS / 'vitdet' / 'vitdet_vit-b16_sfp_deformable_detr_shapes.py').model
    keys = ('arch', 'patch_size', 'window_size', 'global_attn_indexes', 'decomposed_rel_pos',
            'with_cls_token', 'final_norm', 'out_indices')
    assert {k: shapes.backbone[k] for k in keys} == {k: coco.backbone[k] for k in keys}
    assert shapes.backbone.img_size == 512 and 'init_cfg' not in shapes.backbone
    assert shapes.neck.scale_factors == coco.neck.scale_factors
    assert shapes.bbox_head.num_feature_levels == 4


def test_vitdet_deformable_detr_recipe():
    """ViTDet's ViT-B/16 (windows of 14, blocks 2, 5, 8, 11 global, decomposed relative
    positions, no class token, MAE's file) through a simple feature pyramid into Deformable
    DETR at 1024: builds and runs on the meta device (a non-square input too: windows pad),
    layer-wise lr decay with the tables at their block's rate; no number claimed."""
    path = CONFIGS / 'vitdet' / 'vitdet_vit-b16_sfp_deformable_detr_coco.py'
    assert VITDET == [path, CONFIGS / 'vitdet' / 'vitdet_vit-b16_sfp_deformable_detr_shapes.py']
    first = path.read_text().split('\n')[0]
    assert first.startswith("# ViTDet's ViT-B/16") and 'not measured' in first
    cfg = load(path)
    b = cfg.model.backbone
    assert (b.window_size, b.global_attn_indexes, b.decomposed_rel_pos, b.with_cls_token,
            b.final_norm, b.img_size, b.pos_grid) == (14, (2, 5, 8, 11), True, False, False,
                                                      1024, (14, 14))
    assert b.init_cfg.checkpoint == 'checkpoints/mae_pretrain_vit_base.pth'
    assert cfg.model.bbox_head.num_feature_levels == 4
    model = build_model(cfg.model, device='meta')
    assert [blk.attn.window_size for blk in model.backbone.blocks] == [14, 14, 0] * 4
    assert model.backbone.blocks[2].attn.rel_pos_h.shape == (127, 64)  # the 64 x 64 grid
    assert model.backbone.blocks[0].attn.rel_pos_h.shape == (27, 64)  # a 14 x 14 window
    for h, w in ((1024, 1024), (768, 1024)):
        maps = model.neck(model.backbone(torch.empty(1, 3, h, w, device='meta')))
        assert [tuple(m.shape[-2:]) for m in maps] == [(h // 8, w // 8), (h // 16, w // 16),
                                                       (h // 32, w // 32)]
    with DefaultScope.overwrite_default_scope('densevit'):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {names[id(p)]: g for g in wrapper.optimizer.param_groups for p in g['params']}
    lr = cfg.optim_wrapper.optimizer.lr
    assert groups['backbone.blocks.11.attn.rel_pos_h']['lr'] == pytest.approx(lr * 0.7)
    assert groups['backbone.blocks.0.attn.qkv.weight']['lr'] == pytest.approx(lr * 0.7 ** 12)
    assert groups['backbone.pos_embed.weight']['lr'] == pytest.approx(lr * 0.7 ** 13)
    offsets = next(n for n in groups if n.endswith('sampling_offsets.weight'))
    assert groups[offsets]['lr'] == pytest.approx(lr * 0.1)


def test_upernet_recipe():
    """mmseg's swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512 recipe, with
    its zoo mIoU stated as expected, not measured."""
    path = CONFIGS / 'upernet' / 'upernet_swin_t_512x512_ade20k.py'
    assert UPERNET == [path]
    cfg = load(path)
    model = cfg.model
    backbone, head, aux = model.backbone, model.decode_head, model.auxiliary_head
    assert (backbone.type, backbone.arch, backbone.window_size, backbone.drop_path_rate) == (
        'SwinTransformer', 'tiny', 7, 0.3)
    assert backbone.always_shift and tuple(backbone.out_indices) == (0, 1, 2, 3)
    assert backbone.init_cfg.checkpoint == 'checkpoints/swin_tiny_patch4_window7_224.pth'
    assert (head.type, head.in_channels, head.channels, tuple(head.pool_scales)) == (
        'UPerHead', [96, 192, 384, 768], 512, (1, 2, 3, 6))
    assert (aux.type, aux.in_channels, aux.in_index, aux.channels, aux.num_convs,
            aux.concat_input, aux.loss_decode.loss_weight) == (
        'FCNHead', 384, 2, 256, 1, False, 0.4)
    assert head.num_classes == aux.num_classes == 150 and model.test_cfg.mode == 'whole'
    assert cfg.optim_wrapper.optimizer == dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999),
                                               weight_decay=0.01)
    warmup, poly = cfg.param_scheduler
    assert (warmup.type, warmup.end, poly.type, poly.power, poly.begin, poly.end) == (
        'LinearLR', 1500, 'PolyLR', 1.0, 1500, 160000)
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2
    assert model.data_preprocessor.size == (512, 512)
    first = path.read_text().split('\n_base_')[0]
    assert "MMSegmentation's recipe" in first.splitlines()[0]
    assert '44.41 / 45.79' in first and 'expected, not measured here' in first
    built = build_model(model, device='meta')
    with DefaultScope.overwrite_default_scope('densevit'):
        wrapper = build_optim_wrapper(built, cfg.optim_wrapper)
    names = {id(p): n for n, p in built.named_parameters()}
    decay = {names[id(p)]: g['weight_decay'] for g in wrapper.optimizer.param_groups
             for p in g['params']}
    table = 'backbone.layers.0.blocks.0.attn.relative_position_bias.relative_position_bias_table'
    assert decay[table] == decay['backbone.norm0.weight'] == 0
    assert decay['decode_head.fpn_bottleneck.conv.weight'] == 0.01


def lr_and_decay(model, optim_wrapper):
    """{parameter name: (lr, weight decay)} of the optimizer the config's wrapper builds."""
    with DefaultScope.overwrite_default_scope('densevit'):
        wrapper = build_optim_wrapper(model, optim_wrapper)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g['lr'], g['weight_decay']) for g in wrapper.optimizer.param_groups
            for p in g['params']}


def test_dinov2_upernet_recipe():
    """DINOv2 ViT-B/14 at its own 37 x 37 grid (518 crops), loaded from HF's file, through a
    simple feature pyramid into UperNet; layer-wise lr decay with no weight decay on the
    class token, position table and LayerScale gammas; no number claimed."""
    path = CONFIGS / 'dinov2' / 'dinov2_vit-b14_upernet_518x518_ade20k.py'
    assert [p.name for p in DINOV2] == ['dinov2_vit-b14_segformer-head_518x518_ade20k.py',
                                        path.name]
    light = load(DINOV2[0]).model
    assert light.decode_head.type == 'SegformerHead' and light.auxiliary_head is None
    assert light.backbone == load(path).model.backbone
    cfg = load(path)
    model = cfg.model
    b = model.backbone
    assert (b.type, b.arch, b.patch_size, b.img_size, b.layer_scale_init_value) == (
        'VisionTransformer', 'B', 14, 518, 1.0)
    assert b.init_cfg.checkpoint == 'checkpoints/dinov2-base/model.safetensors'
    assert model.neck.in_stride == 14 and model.data_preprocessor.size == (518, 518)
    assert model.data_preprocessor.mean == [123.675, 116.28, 103.53]  # ImageNet's, as DINOv2
    assert model.decode_head.num_classes == model.auxiliary_head.num_classes == 150
    assert 'nothing measured here' in path.read_text().split('\n_base_')[0]
    built = build_model(model, device='meta')
    assert built.backbone.grid_hw == (37, 37)
    groups = lr_and_decay(built, cfg.optim_wrapper)
    lr = cfg.optim_wrapper.optimizer.lr
    assert groups['backbone.cls_token'] == (pytest.approx(lr * 0.9 ** 13), 0.0)
    assert groups['backbone.blocks.11.ls2.gamma'] == (pytest.approx(lr * 0.9), 0.0)
    assert groups['backbone.blocks.0.attn.qkv.weight'] == (pytest.approx(lr * 0.9 ** 12), 0.01)
    assert groups['decode_head.fpn_bottleneck.conv.weight'] == (pytest.approx(lr), 0.01)


def test_beit_upernet_recipe():
    """BEiT's ADE20K recipe for its self-supervised ViT-B/16 (512 crops, lr 7e-4, layer
    decay 0.65, weight decay 0.05, 160k iterations): no key bias, LayerScale 0.1, a relative
    bias per layer; the paper's numbers stated as expected, not measured."""
    path = CONFIGS / 'beit' / 'beit_vit-b16_upernet_512x512_ade20k.py'
    assert BEIT == [path]
    cfg = load(path)
    model = cfg.model
    b = model.backbone
    assert (b.type, b.arch, b.patch_size, b.img_size, tuple(b.qkv_bias)) == (
        'VisionTransformer', 'B', 16, 512, (True, False, True))
    assert (b.layer_scale_init_value, b.pos_embed, b.drop_path_rate) == (
        0.1, dict(type='relative'), 0.1)
    assert b.init_cfg.checkpoint == 'checkpoints/beit-base-patch16-224-pt22k/model.safetensors'
    assert (model.decode_head.channels, model.auxiliary_head.in_index) == (768, 2)
    # BEiT's pyramid: layers 4, 6, 8, 12 rescaled by 4, 2, 1, 1/2
    assert (tuple(b.out_indices), model.neck.type, tuple(model.neck.rescales)) == (
        (3, 5, 7, 11), 'Feature2Pyramid', (4, 2, 1, 0.5))
    assert model.test_cfg == dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2
    warmup, poly = cfg.param_scheduler
    assert (warmup.end, poly.power, poly.end) == (1500, 1.0, 160000)
    first = path.read_text().split('\n_base_')[0]
    assert '45.6' in first and '47.7' in first and 'expected, not measured here' in first
    built = build_model(model, device='meta')
    assert built.backbone.grid_hw == (32, 32) and len(built.backbone.pos_embed) == 12
    groups = lr_and_decay(built, cfg.optim_wrapper)
    lr = cfg.optim_wrapper.optimizer.lr
    assert lr == 7e-4
    assert groups['backbone.cls_token'] == (pytest.approx(lr * 0.65 ** 13), 0.0)
    assert groups['backbone.pos_embed.11.relative_position_bias_table'] == (
        pytest.approx(lr * 0.65), 0.0)
    assert groups['backbone.pos_embed.0.extra_token_table'] == (pytest.approx(lr * 0.65 ** 12),
                                                                0.0)
    assert groups['backbone.blocks.0.attn.q_bias'] == (pytest.approx(lr * 0.65 ** 12), 0.0)
    assert groups['backbone.blocks.0.attn.qkv.weight'] == (pytest.approx(lr * 0.65 ** 12), 0.05)
    assert groups['decode_head.fpn_bottleneck.conv.weight'] == (pytest.approx(lr), 0.05)
