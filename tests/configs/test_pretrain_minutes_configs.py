"""The equal-minutes study (configs/studies/pretrain_minutes*): the DINO and BEiT pre-trainings
are their quickstarts with only the schedule cut (every schedule moved with it), and the rows
of each fine-tuning grid differ from the scratch row in the ViT's start alone (BEiT's row also
in BEiT's position code and LayerScale), so a difference in the results is the start's."""
from pathlib import Path

import pytest
from mmengine.config import Config

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'


def load(name):
    return Config.fromfile(str(CONFIGS / name)).to_dict()


def differing(a, b, prefix=''):
    """Dotted keys whose values differ between the nested dicts ``a`` and ``b``."""
    keys = []
    for k in sorted({*a, *b}):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            keys += differing(x, y, f'{prefix}{k}.')
        elif x != y:
            keys.append(prefix + k)
    return keys


def test_dino_is_the_quickstart_with_every_schedule_cut_to_300_iterations():
    short = load('studies/pretrain_minutes/dino_vit_shapes_15min.py')
    full = load('dino_ssl/dino_vit_shapes_quickstart.py')
    assert differing(short, full) == [
        'default_hooks.checkpoint.interval', 'max_iters', 'model.momentum.total_steps',
        'model.teacher_temp.warmup_steps', 'param_scheduler', 'train_cfg.max_iters',
        'train_cfg.val_interval']
    assert short['max_iters'] == short['train_cfg']['max_iters'] == 300
    assert short['model']['momentum']['total_steps'] == 300
    assert short['model']['teacher_temp']['warmup_steps'] == 90  # the quickstart's 30%
    warmup, cosine, decay = short['param_scheduler']
    assert warmup['end'] == cosine['begin'] == 15  # the quickstart's 5% (100 of 2,000)
    assert cosine['end'] == decay['end'] == 300
    assert [s['type'] for s in short['param_scheduler']] == [
        s['type'] for s in full['param_scheduler']]


def test_beit_is_the_quickstart_on_the_mae_quickstarts_tokens_cut_to_700_iterations():
    short = load('studies/pretrain_minutes/beit_vit_shapes_15min.py')
    full = load('beit_ssl/beit_vit_shapes_quickstart.py')
    assert differing(short, full) == [
        'default_hooks.checkpoint.interval', 'max_iters', 'model.tokenizer.checkpoint',
        'param_scheduler', 'train_cfg.max_iters', 'train_cfg.val_interval']
    assert short['model']['tokenizer']['checkpoint'].endswith('mae4k_k512.pth')
    assert short['param_scheduler'][0] == full['param_scheduler'][0]  # the warm-up
    assert short['param_scheduler'][1]['end'] == short['train_cfg']['max_iters'] == 700


@pytest.mark.parametrize('task', ['seg', 'det'])
def test_rows_differ_from_scratch_in_the_vits_start_alone(task):
    folder = CONFIGS / 'studies' / f'pretrain_minutes_{task}'
    rows = {p.stem: load(str(p.relative_to(CONFIGS))) for p in sorted(folder.glob('*.py'))}
    assert set(rows) == {'scratch', 'mae', 'beit', 'dino'}
    scratch = rows['scratch']
    assert scratch['model']['backbone']['init_cfg'] is None
    starts = {}
    for name in ('mae', 'beit', 'dino'):
        beit_only = ['model.backbone.layer_scale_init_value', 'model.backbone.pos_embed']
        # beit_checkpoint: the BEiT fine-tuning config's variable, overridden by the row's file
        assert [k for k in differing(rows[name], scratch) if k != 'beit_checkpoint'] == (
            ['model.backbone.init_cfg'] + (beit_only if name == 'beit' else [])), name
        starts[name] = rows[name]['model']['backbone']['init_cfg']
    assert starts['mae']['checkpoint'].endswith('mae_vit_shapes_quickstart/seed0/iter_4000.pth')
    assert starts['beit']['checkpoint'].endswith('beit_vit_shapes_15min/seed0/iter_700.pth')
    assert starts['dino']['checkpoint'].endswith('dino_vit_shapes_15min/seed0/iter_300.pth')
    assert starts['dino']['prefix'] == 'teacher.backbone.'  # DINO's teacher, as the paper
    assert rows['beit']['model']['backbone']['pos_embed'] == dict(
        type='relative', placement='every_layer')
