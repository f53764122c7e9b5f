"""tools/run_study.py: a grid of configs trained through run_seeds.py's runs, resumably, the
table computed from the metrics files, and runs that record another config refused."""
import json
import os
import subprocess
import sys

import pytest

from tiny_run import REPO, load_tool, subprocess_env, write_config

run_study = load_tool('tools/run_study.py')
METRIC = 'coco/bbox_mAP_50'


def _grid(root):
    """Two tiny study rows, data shared: no position embedding, and a learned 1D one."""
    study = root / 'tiny_study'
    study.mkdir()
    for row, pos_embed in (('none', "dict(type='none')"),
                           ('learned_1d-stem', "dict(type='learned_1d', placement='stem')")):
        write_config(study, data_root=root / 'shapes', name=f'tiny_pe-{row}.py',
                     extra=f'model = dict(backbone=dict(pos_embed={pos_embed}))\n')
    return study


def _run(root, *extra):
    return subprocess.run(
        [sys.executable, str(REPO / 'tools/run_study.py'), str(root / 'tiny_study'), '--seeds',
         '0', '--threads', '1', '--parallel', '2', '--max-iters', '2', '--results',
         str(root / 'results'), '--work-root', str(root / 'runs'), '--metrics', METRIC,
         '--cfg-options', 'default_hooks.logger.interval=2', *extra],
        env=subprocess_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope='module')
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp('study')
    _grid(root)
    done = _run(root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return dict(root=root, stdout=done.stdout)


def _metrics(root, stem, seed=0):
    return json.loads((root / 'results/tiny_study' / stem / f'seed{seed}.json').read_text())


def test_each_run_has_its_metrics_file_with_the_budget(grid):
    for row in ('none', 'learned_1d-stem'):
        run = _metrics(grid['root'], f'tiny_pe-{row}')
        assert run['max_iters'] == 2 and run['results']['last_iteration'] == 2
        assert run['threads'] == 1 and run['provenance']['torch_threads'] == 1
        # --max-iters moved the MultiStepLR's end and milestone with it
        assert run['cfg_options'] == ['default_hooks.logger.interval=2', 'train_cfg.max_iters=2',
                                      'param_scheduler.1.end=2', 'param_scheduler.1.milestones=[2]']
        assert (grid['root'] / f'runs/tiny_study/tiny_pe-{row}/seed0/train_output.log').is_file()


def test_the_table_cells_are_the_metrics_files_values(grid):
    root = grid['root']
    table = json.loads((root / 'results/tiny_study/table.json').read_text())['results']
    assert table['max_iters'] == [2] and table['metrics'] == [METRIC]
    assert table['commands'] and 'run_study.py' in table['commands'][0]
    for row, column in (('none', 'stem'), ('learned_1d-stem', 'stem')):
        stem = f'tiny_pe-{row}'
        value = _metrics(root, stem)['results']['last'][METRIC]
        cell = table['cells'][stem]
        assert (cell['row'], cell['column']) == (row.split('-')[0], column)
        assert cell['metrics'][METRIC] == dict(values={'0': value}, mean=value, min=value,
                                               max=value)
        assert f'| {row.split("-")[0]} | {value:.4g} |' in grid['stdout']


def test_a_second_invocation_skips_finished_runs(grid):
    root = grid['root']
    before = (root / 'results/tiny_study/tiny_pe-none/seed0.json').read_text()
    again = _run(root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'none seed 0: done' in again.stdout and 'learned_1d-stem seed 0: done' in again.stdout
    assert 'training in' not in again.stdout
    assert (root / 'results/tiny_study/tiny_pe-none/seed0.json').read_text() == before


def test_start_within_starts_no_run_late_and_keeps_finished_ones(grid, tmp_path):
    # finished runs are still 'done' (and tabled) past the limit
    again = _run(grid['root'], '--start-within', '0')
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'none seed 0: done' in again.stdout and 'not started' not in again.stdout
    # a fresh grid past its limit (0 minutes): nothing trains, the runs left are named
    _grid(tmp_path)
    late = _run(tmp_path, '--start-within', '0')
    assert late.returncode == 0, late.stderr[-3000:]
    for row in ('none', 'learned_1d-stem'):
        assert f'{row} seed 0: not started (past --start-within 0 minutes)' in late.stdout
        assert not (tmp_path / f'runs/tiny_study/tiny_pe-{row}').exists()
    assert '2 run(s) not started' in late.stderr and 'training in' not in late.stdout
    bad = _run(tmp_path, '--start-within', '-1')
    assert bad.returncode == 2 and '--start-within must be at least 0 minutes, got -1' in bad.stderr


def _fabricate(results, name, stem, seed, value, config):
    """A metrics file as run_seeds.train_run writes it (the parts the table reads)."""
    path = results / name / stem / f'seed{seed}.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(
        provenance=dict(command='python tools/run_study.py STUDY'), config=config, max_iters=300,
        results=dict(seed=seed, last_iteration=300, last={'mIoU': value, 'aAcc': 90.0}))))


def test_a_three_seed_row_shows_mean_and_min_max(tmp_path, capsys):
    study = _grid(tmp_path)
    for seed, value in enumerate((40.0, 46.0, 55.0)):
        _fabricate(tmp_path / 'r', 'fab', 'tiny_pe-none', seed, value,
                   str(study / 'tiny_pe-none.py'))
    assert run_study.main([str(study), '--name', 'fab', '--table-only', '--metrics', 'mIoU',
                           '--results', str(tmp_path / 'r')]) == 0
    table = json.loads((tmp_path / 'r/fab/table.json').read_text())['results']
    cell = table['cells']['tiny_pe-none']['metrics']['mIoU']
    assert cell == dict(values={'0': 40.0, '1': 46.0, '2': 55.0}, mean=47.0, min=40.0, max=55.0)
    assert table['cells']['tiny_pe-learned_1d-stem']['metrics'] == {}
    out = capsys.readouterr().out
    assert '| mIoU | stem |' in out and '| none | 47 (40-55) |' in out
    assert '| learned_1d | not run |' in out and 'max_iters 300' in out


def test_rows_by_name_give_each_config_its_own_row(tmp_path, capsys):
    """``--rows name``: a grid varying something else than the position embedding (here two
    configs with the same one) gets a row per config, not one cell for both."""
    study = tmp_path / 'tiny_study'
    study.mkdir()
    for name in ('scratch', 'mae'):
        write_config(study, data_root=tmp_path / 'shapes', name=f'{name}.py')
    for seed, value in enumerate((61.0, 58.0, 64.0)):
        _fabricate(tmp_path / 'r', 'fab', 'mae', seed, value, str(study / 'mae.py'))
    _fabricate(tmp_path / 'r', 'fab', 'scratch', 0, 50.0, str(study / 'scratch.py'))
    assert run_study.main([str(study), '--name', 'fab', '--table-only', '--metrics', 'mIoU',
                           '--results', str(tmp_path / 'r'), '--rows', 'name']) == 0
    out = capsys.readouterr().out
    assert '| mIoU | all |' in out
    assert '| mae | 61 (58-64) |' in out and '| scratch | 50 |' in out


def test_three_seed_rows_and_the_budget_options(tmp_path):
    study = _grid(tmp_path)
    configs = sorted(str(p) for p in study.glob('*.py'))
    plan = run_study.seeds_per_config(configs, [0], ['none'], [0, 1, 2])
    assert {run_study.row_name(c): s for c, s in plan.items()} == {
        'none': [0, 1, 2], 'learned_1d-stem': [0]}
    with pytest.raises(ValueError, match="no config has the row nonee"):
        run_study.seeds_per_config(configs, [0], ['nonee'])
    assert run_study.budget_options(configs[0], 8) == [
        'train_cfg.max_iters=8', 'param_scheduler.1.end=8', 'param_scheduler.1.milestones=[6]']


@pytest.mark.parametrize('recorded_in', ['metrics file', 'work dir', 'mmengine copy'])
def test_a_run_recording_another_config_is_refused(tmp_path, capsys, recorded_in):
    """run_study.py and run_seeds.py refuse before training, naming both configs."""
    study = _grid(tmp_path)
    given, other = study / 'tiny_pe-none.py', tmp_path / 'other.py'
    work = tmp_path / 'runs/tiny_study/tiny_pe-none/seed0'
    work.mkdir(parents=True)
    if recorded_in == 'metrics file':
        _fabricate(tmp_path / 'results', 'tiny_study', 'tiny_pe-none', 0, 50.0, str(other))
    elif recorded_in == 'work dir':
        (work / 'run_seeds_config.json').write_text(json.dumps(dict(config=str(other))))
    else:  # a work dir from before the record: mmengine's copy of the config it trained
        (work / 'other.py').write_text('')
    before = sorted(work.iterdir())
    common = ['--seeds', '0', '--results', str(tmp_path / 'results'), '--work-root',
              str(tmp_path / 'runs')]
    assert run_study.main([str(study), *common]) == 2
    err = capsys.readouterr().err
    assert 'refused' in err and 'other.py' in err and os.path.realpath(given) in err
    assert sorted(work.iterdir()) == before  # nothing trained, nothing recorded
    run_seeds = load_tool('tools/run_seeds.py')
    assert run_seeds.main([str(given), '--name', 'tiny_study/tiny_pe-none', *common]) == 2
    err = capsys.readouterr().err
    assert 'run_seeds.py: refused' in err and 'other.py' in err
    assert os.path.realpath(given) in err and sorted(work.iterdir()) == before


def test_rope_variants_are_rows_of_their_own(tmp_path):
    rows = {}
    for name, pe in (('eva', "dict(type='rope', placement='every_layer')"),
                     ('dino', "dict(type='rope', placement='every_layer', convention='dinov3')"),
                     ('mixed', "dict(type='rope', placement='every_layer', mixed=True)"),
                     ('both', "dict(type='rope', convention='dinov3', mixed=True)")):
        path = tmp_path / f'{name}.py'
        path.write_text(f'model = dict(backbone=dict(pos_embed={pe}))\n')
        rows[name] = run_study.position(str(path))
    assert rows == {'eva': ('rope', 'every_layer'), 'dino': ('rope dinov3', 'every_layer'),
                    'mixed': ('rope mixed', 'every_layer'),
                    'both': ('rope dinov3 mixed', 'every_layer')}
