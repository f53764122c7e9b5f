"""MAE pre-training through tools/train.py (validation loss, curves, skipped images) and the
Figure-2 reconstruction tool."""
import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import LogProcessor

from densevit.registry import MODELS

from tiny_run import REPO, isolated, load_tool, scalar_records, unique_names, unlabelled_data

QUICKSTART = REPO / 'configs' / 'mae' / 'mae_vit_shapes_quickstart.py'


def write_images(folder, count, size):
    rng = np.random.default_rng(0)
    for i in range(count):
        path = Path(folder) / ('sub' if i % 2 else '') / f'{i}.png'
        path.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(path), rng.integers(0, 256, (*size, 3), dtype=np.uint8))


def tiny_config(tmp_path, extra=''):
    """The MAE quickstart shrunk: a 1-layer ViT of width 32 on 32-pixel crops of a folder of
    random images (train: 6, one of them unreadable and skipped; val: 4)."""
    write_images(tmp_path / 'imgs' / 'train', 6, (40, 48))
    write_images(tmp_path / 'imgs' / 'val', 4, (32, 32))
    (tmp_path / 'imgs' / 'train' / '0.png').write_bytes(b'\x89PNG\r\n\x1a\n not an image')
    root = (tmp_path / 'imgs').as_posix() + '/'
    text = f"""
_base_ = [{str(QUICKSTART)!r}]
model = dict(backbone=dict(img_size=32, arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                                  feedforward_channels=64)),
             neck=dict(embed_dims=16, num_layers=1, num_heads=2))
""" + unlabelled_data(root, 32, skip_unreadable=True) + """
train_cfg = dict(max_iters=4, val_interval=2)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=4))
""" + extra
    path = tmp_path / 'tiny_mae.py'
    path.write_text(text)
    return str(path)


def test_train_logs_the_validation_loss_and_draws_curves(tmp_path, capsys):
    config = tiny_config(tmp_path)
    work = tmp_path / 'work'
    with isolated():
        assert load_tool('tools/train.py').main(
            [config, '--work-dir', str(work), '--cfg-options', *unique_names()]) == 0
    records = scalar_records(work)
    assert [r['step'] for r in records if 'loss_rec' in r] == [1, 2, 3, 4]
    val = [r for r in records if 'pretrain/objective' in r]
    assert [r['step'] for r in val] == [2, 4] and all(r['pretrain/objective'] > 0 for r in val)
    # each validation's own value, not a running mean (mmengine averages keys named '*loss*')
    assert not re.search(LogProcessor().mean_pattern, 'pretrain/objective')
    (log,) = work.glob('*/*.log')
    assert 'skip_unreadable:' in log.read_text() and '0.png' in log.read_text()
    assert (work / 'iter_4.pth').is_file()
    out = tmp_path / 'curves.png'
    assert load_tool('tools/analysis/plot_curves.py').main(
        [str(work), '--x', 'iter', '--out', str(out)]) == 0
    assert cv2.imread(str(out)) is not None


@pytest.mark.parametrize('num, options', [(3, []), (1, ['--raw', '--true-patch-stats'])])
def test_reconstruction_figure_from_a_random_model(tmp_path, capsys, num, options):
    config = tiny_config(tmp_path)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(Config.fromfile(config).model)
    model.init_weights()
    ckpt = tmp_path / 'random.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    out = tmp_path / 'fig.png'
    with isolated():
        rc = load_tool('tools/analysis/mae_reconstruction.py').main(
            [config, str(ckpt), '--num', str(num), '--out', str(out), '--gap', '2', *options,
             '--json', str(tmp_path / 'loss.json')])
    assert rc == 0, capsys.readouterr().err
    img = cv2.imread(str(out))
    assert img.shape == (num * 32 + (num - 1) * 2, 3 * 32 + 2 * 2, 3)
    # right panel: the original validation image (sorted: 0.png first)
    original = cv2.imread(str(tmp_path / 'imgs' / 'val' / '0.png'))
    assert np.array_equal(img[:32, -32:], original)
    printed = capsys.readouterr().out
    assert f'wrote {out}: {num} images' in printed
    written = json.loads((tmp_path / 'loss.json').read_text())  # the printed loss, kept
    loss = written['results']['masked_patch_loss']
    assert f'mean loss on their masked patches {loss:.4f}' in printed
    assert written['results']['num_images'] == num and written['checkpoint'] == str(ckpt)
    assert 'commit' in written['provenance']


def test_reconstruction_tool_refuses_other_models(tmp_path, capsys):
    config = tiny_config(tmp_path)
    mpp = tmp_path / 'mpp.py'
    mpp.write_text(f"_base_ = [{config!r}]\nmodel = dict(_delete_=True, type='MaskedPatchPrediction', "
                   "backbone={{_base_.model.backbone}}, head=dict(type='MPPHead'))\n")
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(Config.fromfile(str(mpp)).model)
    torch.save(dict(state_dict=model.state_dict()), tmp_path / 'mpp.pth')
    tool = load_tool('tools/analysis/mae_reconstruction.py')
    with isolated():
        assert tool.main([str(mpp), str(tmp_path / 'mpp.pth')]) == 1
        assert tool.main([config, str(tmp_path / 'missing.pth')]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ('densevit: MaskedPatchPrediction does not reconstruct pixels; this tool '
                      'shows MAE models')
    assert err[1].startswith('densevit: ') and 'missing.pth' in err[1]


def test_check_tool_lists_the_unreadable_unlabelled_image(tmp_path, capsys):
    config = tiny_config(tmp_path)
    assert load_tool('tools/dataset/check.py').main([config]) == 1
    out = capsys.readouterr().out
    assert f"train: image: cannot decode image: {tmp_path / 'imgs' / 'train' / '0.png'}" in out
    assert '1 problem found' in out


def test_train_without_validation_as_the_vit_b16_recipe(tmp_path):
    """No val loop (the paper's recipe has none): trains, also on the clock, and saves."""
    config = tiny_config(tmp_path, extra='val_dataloader = None\nval_cfg = None\n'
                                         'val_evaluator = None\ntest_dataloader = None\n'
                                         'test_cfg = None\ntest_evaluator = None\n')
    work = tmp_path / 'work'
    with isolated():
        assert load_tool('tools/train.py').main(
            [config, '--work-dir', str(work), '--minutes', '0.001',
             '--cfg-options', *unique_names()]) == 0
    assert any(work.glob('iter_*.pth')) and not (work / 'training_clock.csv').exists()
    assert [r for r in scalar_records(work) if 'loss_rec' in r]
