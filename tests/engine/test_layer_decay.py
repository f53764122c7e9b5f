"""LayerDecayOptimWrapperConstructor: learning rate and weight decay of every parameter,
checked by hand against ``lr * rate ** (L + 1 - layer_id)``."""
import pytest
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from torch import nn

from densevit.engine.layer_decay_constructor import get_layer_id
from densevit.registry import MODELS

LR, WD, RATE = 1.0, 0.05, 0.5


class Model(nn.Module):
    """``backbone`` + a head, the attribute layout the constructor reads."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = MODELS.build(backbone)
        self.head = nn.Linear(4, 2)


def param_settings(model, **paramwise):
    """{parameter name: (lr, weight_decay)} as the built optimizer holds them."""
    with DefaultScope.overwrite_default_scope('densevit'):
        wrapper = build_optim_wrapper(model, dict(
            type='OptimWrapper', optimizer=dict(type='AdamW', lr=LR, weight_decay=WD),
            constructor='LayerDecayOptimWrapperConstructor',
            paramwise_cfg=dict(layer_decay_rate=RATE, **paramwise)))
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in wrapper.optimizer.param_groups:
        for p in group['params']:
            out[names[id(p)]] = (group['lr'], group['weight_decay'])
    assert len(out) == len(list(model.parameters()))  # every parameter, once
    return out


def test_vit_layer_ids_and_rates():
    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8, with_cls_token=True,
                       arch=dict(embed_dims=8, num_layers=3, num_heads=2,
                                 feedforward_channels=16)))
    got = param_settings(model)  # L = 3 blocks, inferred
    L = 3
    assert got['backbone.patch_embed.proj.weight'] == (RATE ** (L + 1), WD)
    assert got['backbone.cls_token'] == (RATE ** (L + 1), 0.0)  # token: no decay
    pos = [n for n in got if n.startswith('backbone.pos_embed')]
    assert pos and all(got[n] == (RATE ** (L + 1), 0.0) for n in pos)
    for i in range(L):
        weights = [n for n in got if n.startswith(f'backbone.blocks.{i}.') and n.endswith('weight')
                   and 'norm' not in n]
        assert weights and all(got[n] == (pytest.approx(RATE ** (L - i)), WD) for n in weights)
        norms = [n for n in got if n.startswith(f'backbone.blocks.{i}.') and 'norm' in n]
        assert norms and all(got[n][1] == 0.0 for n in norms)  # norms: no decay
    assert got['backbone.norm.weight'] == (LR, 0.0)  # final norm: with the head
    assert got['head.weight'] == (LR, WD) and got['head.bias'] == (LR, 0.0)


def test_vit_registers_and_layer_scale():
    """DINOv2's extra parameters: register tokens with the stem (rate^(L+1), no decay),
    LayerScale gammas with their block, no decay."""
    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8, with_cls_token=True,
                       num_register_tokens=2, layer_scale_init_value=1e-5,
                       arch=dict(embed_dims=8, num_layers=2, num_heads=2,
                                 feedforward_channels=16)))
    got = param_settings(model)
    L = 2
    assert got['backbone.register_tokens'] == (RATE ** (L + 1), 0.0)
    for i in range(L):
        for g in ('ls1', 'ls2'):
            assert got[f'backbone.blocks.{i}.{g}.gamma'] == (pytest.approx(RATE ** (L - i)), 0.0)


def test_vit_num_layers_from_config():
    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8,
                       arch=dict(embed_dims=8, num_layers=2, num_heads=2,
                                 feedforward_channels=16)))
    got = param_settings(model, num_layers=12)  # e.g. a 12-layer recipe's constant
    assert got['backbone.patch_embed.proj.weight'][0] == pytest.approx(RATE ** 13)
    assert got['backbone.blocks.1.attn.qkv.weight'][0] == pytest.approx(RATE ** 11)
    with pytest.raises(ValueError, match='num_layers'):
        param_settings(model, num_layers=1)


def test_swin_cumulative_block_ids():
    model = Model(dict(type='SwinTransformer', arch=dict(embed_dims=8, depths=[2, 3],
                                                         num_heads=[1, 2]),
                       window_size=2, out_indices=(0, 1), drop_path_rate=0.))
    got = param_settings(model)
    L = 5  # 2 + 3 blocks
    assert got['backbone.patch_embed.proj.weight'][0] == pytest.approx(RATE ** (L + 1))
    block = {n for n in got if '.blocks.' in n and n.endswith('weight') and 'norm' not in n
             and 'relative_position' not in n}
    for name in block:
        stage, idx = int(name.split('.')[2]), int(name.split('.')[4])
        layer_id = [0, 2][stage] + idx + 1
        assert got[name] == (pytest.approx(RATE ** (L + 1 - layer_id)), WD), name
    tables = [n for n in got if 'relative_position_bias_table' in n]
    assert tables and all(got[n][1] == 0.0 for n in tables)
    # stage 0's patch merging follows its last block (id 2)
    merge = [n for n in got if n.startswith('backbone.layers.0.downsample') and
             n.endswith('weight') and 'norm' not in n]
    assert merge and all(got[n][0] == pytest.approx(RATE ** (L + 1 - 2)) for n in merge)


def test_layer_id_rules_by_name():
    offsets = [0, 2, 4, 10, 12]  # Swin-T depths 2, 2, 6, 2
    assert get_layer_id('backbone.layers.2.blocks.5.attn.qkv.weight', 12, offsets) == 10
    assert get_layer_id('backbone.stages.3.blocks.0.mlp.fc1.weight', 12, offsets) == 11
    assert get_layer_id('backbone.layers.2.downsample.reduction.weight', 12, offsets) == 10
    assert get_layer_id('backbone.absolute_pos_embed.weight', 12, offsets) == 0
    assert get_layer_id('backbone.pos_embed.3.weight', 12) == 4  # ViT per-layer table
    assert get_layer_id('bbox_head.class_embed.weight', 12) == 13


def test_custom_keys_multiply_the_layer_rate():
    """paramwise_cfg.custom_keys (e.g. Deformable DETR's 0.1 on sampling offsets) apply on
    top of the layer's rate; the longest matching key wins, as in mmengine."""
    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8,
                       arch=dict(embed_dims=8, num_layers=2, num_heads=2,
                                 feedforward_channels=16)))
    got = param_settings(model, custom_keys={'head': dict(lr_mult=0.1),
                                             'head.weight': dict(lr_mult=0.5, decay_mult=2.),
                                             'attn.qkv': dict(lr_mult=3.)})
    L = 2
    assert got['head.weight'] == (pytest.approx(0.5), pytest.approx(WD * 2))
    assert got['head.bias'] == (pytest.approx(0.1), 0.0)  # 1-d: still no decay
    assert got['backbone.blocks.0.attn.qkv.weight'] == (pytest.approx(3 * RATE ** L), WD)
    assert got['backbone.blocks.0.mlp.fc1.weight'] == (pytest.approx(RATE ** L), WD)


def test_full_rate_last_blocks_leave_the_query_blocks_undecayed():
    """EoMT's trainer: the blocks its queries join keep the full rate; earlier blocks keep
    ``rate ** (L + 1 - layer_id)``."""
    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8,
                       arch=dict(embed_dims=8, num_layers=4, num_heads=2,
                                 feedforward_channels=16)))
    got = param_settings(model, full_rate_last_blocks=2)
    L = 4
    for i, expected in enumerate((RATE ** 4, RATE ** 3, 1.0, 1.0)):  # blocks 0-1 decayed
        assert got[f'backbone.blocks.{i}.attn.qkv.weight'][0] == pytest.approx(LR * expected)
    assert got['backbone.patch_embed.proj.weight'][0] == LR * RATE ** (L + 1)
    assert got['head.weight'][0] == LR
    with pytest.raises(ValueError, match='full_rate_last_blocks=5: the backbone has 4 blocks'):
        param_settings(model, full_rate_last_blocks=5)


def test_two_stage_warmup_poly_by_hand():
    """TwoStageWarmupPolyLR against EoMT's schedule written out for w1 = 2, w2 = 4, 12 steps,
    power 0.9: the head warms up over 2 steps then decays over 10; the backbone stands at 0
    for 2 steps, warms up over 4, then decays over 6. Resumed at step 7 it goes on the same."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope

    from densevit.registry import PARAM_SCHEDULERS

    model = Model(dict(type='VisionTransformer', img_size=32, patch_size=8,
                       arch=dict(embed_dims=8, num_layers=2, num_heads=2,
                                 feedforward_channels=16)))

    def build(wrapper=None):
        with DefaultScope.overwrite_default_scope('densevit'):
            wrapper = wrapper or build_optim_wrapper(model, dict(
                type='OptimWrapper', optimizer=dict(type='AdamW', lr=LR, weight_decay=WD),
                constructor='LayerDecayOptimWrapperConstructor',
                paramwise_cfg=dict(layer_decay_rate=RATE)))
            sched = PARAM_SCHEDULERS.build(dict(
                type='TwoStageWarmupPolyLR', optimizer=wrapper, warmup=(2, 4), power=0.9,
                end=12))
        return wrapper, sched

    def head_by_hand(t):
        return t / 2 if t < 2 else (1 - (t - 2) / 10) ** 0.9

    def backbone_by_hand(t):
        return 0.0 if t < 2 else (t - 2) / 4 if t < 6 else (1 - (t - 6) / 6) ** 0.9

    wrapper, sched = build()
    groups = wrapper.optimizer.param_groups
    head = next(g for g in groups if 'head.weight' in g['param_names'])
    block = next(g for g in groups if 'backbone.blocks.0.attn.qkv.weight' in g['param_names'])
    assert block['initial_lr'] == pytest.approx(RATE ** 2)
    seen = []
    for t in range(12):
        if t == 7:  # what a checkpoint holds here: the optimizer's and the scheduler's state
            state, opt_state = sched.state_dict(), wrapper.optimizer.state_dict()
        seen.append((head['lr'], block['lr']))
        assert head['lr'] == pytest.approx(LR * head_by_hand(t)), t
        assert block['lr'] == pytest.approx(RATE ** 2 * backbone_by_hand(t)), t
        wrapper.optimizer.step()
        sched.step()
    assert seen[2] == (pytest.approx(1.0), 0.0) and seen[6][1] == pytest.approx(RATE ** 2)
    # resumed as the Runner does (a new scheduler, then the saved state): the same values
    _, again = build(wrapper=wrapper)
    wrapper.optimizer.load_state_dict(opt_state)  # new group dicts: look them up again
    again.load_state_dict(state)
    groups = wrapper.optimizer.param_groups
    head = next(g for g in groups if 'head.weight' in g['param_names'])
    block = next(g for g in groups if 'backbone.blocks.0.attn.qkv.weight' in g['param_names'])
    assert (head['lr'], block['lr']) == seen[7]
    for t in range(8, 12):
        again.step()
        assert (head['lr'], block['lr']) == (pytest.approx(seen[t][0]),
                                             pytest.approx(seen[t][1])), t


def test_two_stage_warmup_refusals():
    from mmengine.registry import DefaultScope
    from torch.optim import SGD

    from densevit.registry import PARAM_SCHEDULERS

    plain = SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    decayed = SGD([dict(params=nn.Linear(2, 2).parameters(), layer_id=0)], lr=0.1)
    with DefaultScope.overwrite_default_scope('densevit'):
        with pytest.raises(ValueError, match="LayerDecayOptimWrapperConstructor"):
            PARAM_SCHEDULERS.build(dict(type='TwoStageWarmupPolyLR', optimizer=plain, end=10))
        with pytest.raises(ValueError, match=r'warmup=\(5, 5\) must be two'):
            PARAM_SCHEDULERS.build(dict(type='TwoStageWarmupPolyLR', optimizer=decayed,
                                        warmup=(5, 5), end=10))
