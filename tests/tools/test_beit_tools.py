"""BEiT end to end: tools/pretrain/make_tokenizer.py on a tiny teacher, the BEiT config through
tools/train.py with that tokenizer, and the segmentation fine-tuning config from a BEiT
checkpoint (loaded exactly, then trained)."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

from tiny_run import (
    REPO,
    built_from_checkpoint,
    isolated,
    load_tool,
    save_pretraining_model,
    scalar_records,
    tiny_seg_data,
    unique_names,
    unlabelled_data,
)

MAE_QUICKSTART = REPO / 'configs' / 'mae' / 'mae_vit_shapes_quickstart.py'
BEIT_QUICKSTART = REPO / 'configs' / 'beit_ssl' / 'beit_vit_shapes_quickstart.py'
BEIT_FINETUNE = REPO / 'configs' / 'beit_ssl' / 'finetune' / 'segformer_head_vit_shapes_beit.py'
TINY_VIT = "dict(type='VisionTransformer', img_size=48, patch_size=8, with_cls_token=False, " \
           "arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64))"


def write_images(folder, count, size, seed):
    rng = np.random.default_rng(seed)
    Path(folder).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        cv2.imwrite(str(Path(folder) / f'{i}.png'), rng.integers(0, 256, (*size, 3), np.uint8))


@pytest.fixture
def tiny_teacher(tmp_path):
    """A tiny MAE config (the quickstart's, a 2-layer ViT of width 32 on 48-pixel images of a
    folder: 6 to train on, 4 to validate on)."""
    write_images(tmp_path / 'imgs' / 'train', 6, (48, 48), 0)
    write_images(tmp_path / 'imgs' / 'val', 4, (48, 48), 1)
    path = tmp_path / 'tiny_mae.py'
    path.write_text(f"_base_ = [{str(MAE_QUICKSTART)!r}]\n"
                    f"model = dict(backbone=dict(_delete_=True, **{TINY_VIT}),\n"
                    f"             neck=dict(embed_dims=16, num_layers=1, num_heads=2))\n"
                    + unlabelled_data(tmp_path / 'imgs', 48))
    return path


def train(config, work_dir):
    """tools/train.py CONFIG --work-dir WORK_DIR in this process; its exit status."""
    with isolated():
        return load_tool('tools/train.py').main(
            [str(config), '--work-dir', str(work_dir), '--cfg-options', *unique_names()])


def tiny_beit_config(tmp_path, tokenizer, num_tokens):
    """The BEiT quickstart on the tiny teacher's ViT and images, 2 iterations."""
    config = tmp_path / 'tiny_beit.py'
    config.write_text(f"""
_base_ = [{str(BEIT_QUICKSTART)!r}]
model = dict(backbone=dict(img_size=48, arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                                  feedforward_channels=64)),
             min_num_patches=4, head=dict(num_tokens={num_tokens}),
             tokenizer=dict(teacher={TINY_VIT}, checkpoint={str(tokenizer)!r}))
train_cfg = dict(max_iters=2, val_interval=2)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=2))
""" + unlabelled_data(tmp_path / 'imgs', 48))
    return config


def test_make_tokenizer_then_train_beit_two_iterations(tiny_teacher, tmp_path, capsys):
    tok = tmp_path / 'tok.pth'
    tool = load_tool('tools/pretrain/make_tokenizer.py')
    assert tool.main([str(tiny_teacher), 'none', '--out', str(tok), '--k', '16', '--iters', '5',
                      '--num-images', '0', '--json', str(tmp_path / 'tok.json')]) == 0
    assert 'wrote' in capsys.readouterr().out
    saved = torch.load(tok, weights_only=True)
    meta = saved['meta']
    assert json.loads((tmp_path / 'tok.json').read_text())['results'] == meta
    assert (meta['k'], meta['layer'], meta['normalize'], meta['num_images']) == (16, -1, True, 6)
    assert meta['num_features'] == 6 * 36 and meta['teacher_checkpoint'] == 'none'
    assert saved['codebook'].shape == (16, 32)
    # the codebook's use on the clustered features, by numpy, from the teacher in the file
    with DefaultScope.overwrite_default_scope('densevit'):
        teacher = MODELS.build(eval(TINY_VIT))
    teacher.load_state_dict(saved['teacher'])
    teacher.eval()
    images = sorted((tmp_path / 'imgs' / 'train').glob('*.png'))
    mean, std = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])
    x = np.stack([(cv2.imread(str(p))[..., ::-1] - mean) / std for p in images])
    with torch.no_grad():
        (fmap,) = teacher(torch.from_numpy(x).permute(0, 3, 1, 2).float())
    feats = fmap.permute(0, 2, 3, 1).reshape(-1, 32).numpy().astype(np.float64)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    code = saved['codebook'].numpy().astype(np.float64)
    ids = ((feats[:, None] - code[None]) ** 2).sum(-1).argmin(1)
    assert meta['usage'] == pytest.approx(len(set(ids.tolist())) / 16)

    config = tiny_beit_config(tmp_path, tok, num_tokens=16)
    work = tmp_path / 'work'
    assert train(config, work) == 0
    records = scalar_records(work)
    assert [r['step'] for r in records if 'loss_mim' in r] == [1, 2]
    (val,) = [r for r in records if 'pretrain/objective' in r]
    assert val['pretrain/objective'] > 0 and 0 <= val['pretrain/acc'] <= 1
    state = torch.load(work / 'iter_2.pth', weights_only=False)['state_dict']
    # the tokenizer trained nothing: the file's codebook and teacher in the checkpoint
    assert torch.equal(state['tokenizer.codebook'], saved['codebook'])
    for k, v in saved['teacher'].items():
        assert torch.equal(state[f'tokenizer.teacher.{k}'], v)


@pytest.mark.parametrize('case', ['missing', 'other size'])
def test_train_tool_names_a_missing_or_mismatched_tokenizer_in_one_line(case, tiny_teacher,
                                                                        tmp_path, capsys):
    tok = tmp_path / 'tok.pth'
    if case == 'other size':
        assert load_tool('tools/pretrain/make_tokenizer.py').main(
            [str(tiny_teacher), 'none', '--out', str(tok), '--k', '8', '--iters', '2']) == 0
        capsys.readouterr()
    config = tiny_beit_config(tmp_path, tok, num_tokens=16)
    rc = train(config, tmp_path / 'w')
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1, lines
    if case == 'missing':
        assert f'tokenizer file not found: {tok}' in lines[0] and 'make_tokenizer' in lines[0]
    else:
        assert f'{tok}: the tokenizer has a codebook of 8 visual tokens but the BEiT head ' \
               f'predicts 16' in lines[0]


def test_finetune_config_loads_the_beit_encoder_and_trains(tmp_path):
    cfg = Config.fromfile(str(BEIT_FINETUNE))
    beit = Config.fromfile(str(BEIT_QUICKSTART))
    assert cfg.model.backbone.init_cfg.checkpoint == \
        f'work_dirs/beit_vit_shapes_quickstart/iter_{beit.train_cfg.max_iters}.pth'
    # the BEiT ViT, but a bias per layer and the segmentation images' size
    pre, fine = dict(beit.model.backbone), dict(cfg.model.backbone)
    assert fine.pop('pos_embed') == dict(type='relative', placement='every_layer')
    assert pre.pop('pos_embed') == dict(type='relative', placement='every_layer_shared')
    for key in ('arch', 'patch_size', 'with_cls_token', 'layer_scale_init_value'):
        assert fine[key] == pre[key], key
    path = tmp_path / 'iter_2000.pth'
    pre = Config.fromfile(str(BEIT_QUICKSTART)).model
    pre.tokenizer.checkpoint = None  # a random tokenizer: only the encoder matters here
    sd = save_pretraining_model(pre, path, 2000)
    ours = built_from_checkpoint(cfg.model, path).backbone.state_dict()
    encoder = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    shared = encoder.pop('pos_embed.relative_position_bias_table')  # [31 * 31, heads]
    for k, v in encoder.items():
        torch.testing.assert_close(ours[k], v, atol=0, rtol=0)
    # each layer's own bias: the shared table resized from the 16x16 grid's 31x31 offsets to
    # the 12x12 grid's 23x23, bicubic per head
    heads = shared.shape[1]
    img = shared.t().reshape(1, heads, 31, 31)
    resized = F.interpolate(img, size=(23, 23), mode='bicubic', align_corners=False)
    resized = resized.reshape(heads, -1).t()
    for i in range(4):
        torch.testing.assert_close(ours[f'pos_embed.{i}.relative_position_bias_table'], resized)

    config = tmp_path / 'tiny_finetune.py'
    config.write_text(f"_base_ = [{str(BEIT_FINETUNE)!r}]\n"
                      + tiny_seg_data(tmp_path / 'seg', 48, 12, 24)
                      + f"model = dict(backbone=dict(init_cfg=dict(checkpoint={str(path)!r})))\n"
                        "train_cfg = dict(max_iters=2, val_interval=2)\n"
                        "default_hooks = dict(logger=dict(interval=1), "
                        "checkpoint=dict(interval=2))\n")
    work = tmp_path / 'work'
    assert train(config, work) == 0
    records = scalar_records(work)
    assert [r['step'] for r in records if 'loss' in r] == [1, 2]
    assert any('mIoU' in r for r in records)
