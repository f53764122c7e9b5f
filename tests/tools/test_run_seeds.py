"""tools/run_seeds.py: one metrics file per seed, resumable, the spread over seeds; and
tools/test.py --json (the kept output of an evaluation)."""
import json
import subprocess
import sys

import pytest

from tiny_run import REPO, isolated, load_tool, subprocess_env, unique_names, write_config

OPTIONS = ['train_cfg.max_iters=4', 'train_cfg.val_interval=4']


def _run(config, tmp_path, seeds):
    return subprocess.run(
        [sys.executable, str(REPO / 'tools/run_seeds.py'), config, '--name', 'tiny', '--seeds',
         *map(str, seeds), '--threads', '1', '--results', str(tmp_path / 'results'),
         '--work-root', str(tmp_path / 'runs'), '--cfg-options', *OPTIONS],
        env=subprocess_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope='module')
def study(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('seeds')
    config = write_config(tmp_path)
    # seed 1 was stopped after its iteration-2 checkpoint: the runner must resume it
    with isolated():
        assert load_tool('tools/train.py').main(
            [config, '--work-dir', str(tmp_path / 'runs/tiny/seed1'), '--cfg-options',
             'randomness.seed=1', 'train_cfg.max_iters=2', 'train_cfg.val_begin=100',
             *unique_names()]) == 0
    done = _run(config, tmp_path, [0, 1])
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(root=tmp_path, config=config, stdout=done.stdout)


def test_each_seed_has_its_metrics_file_equal_to_an_evaluation(study, tmp_path):
    """The last validation recorded for seed 0 equals tools/test.py on its final
    checkpoint, written by tools/test.py --json (another path to the same numbers)."""
    root = study['root']
    seed0 = json.loads((root / 'results/tiny/seed0.json').read_text())
    assert seed0['provenance']['torch_threads'] == 1 and seed0['results']['seed'] == 0
    assert seed0['results']['last_iteration'] == 4
    out = tmp_path / 'eval.json'
    with isolated():
        assert load_tool('tools/test.py').main(
            [study['config'], str(root / 'runs/tiny/seed0/iter_4.pth'), '--work-dir',
             str(tmp_path / 'w'), '--json', str(out), '--cfg-options', 'randomness.seed=0',
             *unique_names()]) == 0
    evaluated = json.loads(out.read_text())
    assert evaluated['checkpoint'].endswith('iter_4.pth') and evaluated['provenance']['commit']
    for key, value in seed0['results']['last'].items():
        assert evaluated['results'][key] == pytest.approx(value, abs=1e-4), key


def test_a_stopped_seed_resumes_and_the_summary_names_the_worst(study):
    root = study['root']
    seed1 = json.loads((root / 'results/tiny/seed1.json').read_text())['results']
    assert [a['resumed'] for a in seed1['attempts']] == [True]
    assert seed1['last_iteration'] == 4
    summary = json.loads((root / 'results/tiny/summary.json').read_text())['results']
    seeds = {s: json.loads((root / f'results/tiny/seed{s}.json').read_text())['results']['last']
             for s in (0, 1)}
    for key, row in summary.items():
        values = {s: seeds[s][key] for s in (0, 1)}
        assert row['min'] == min(values.values()) and row['max'] == max(values.values())
        assert values[int(row['worst_seed'])] == row['min']
    assert '| metric | seed 0 | seed 1 | worst seed |' in study['stdout']


def test_a_second_call_skips_what_is_done(study):
    before = (study['root'] / 'results/tiny/seed0.json').read_text()
    again = _run(study['config'], study['root'], [0, 1])
    assert again.returncode == 0 and 'seed 0: done' in again.stdout
    assert (study['root'] / 'results/tiny/seed0.json').read_text() == before


def test_the_worst_seed_of_a_loss_is_the_highest():
    run_seeds = load_tool('tools/run_seeds.py')
    runs = {0: dict(last={'pretrain/objective': 0.30, 'coco/bbox_mAP': 0.5}),
            1: dict(last={'pretrain/objective': 0.35, 'coco/bbox_mAP': 0.4})}
    table = run_seeds.summarise(runs)
    assert table['pretrain/objective']['worst_seed'] == 1
    assert table['coco/bbox_mAP']['worst_seed'] == 1
    runs[1]['last']['pretrain/objective'] = 0.25
    assert run_seeds.summarise(runs)['pretrain/objective']['worst_seed'] == 0


def test_validations_are_the_records_without_a_loss(tmp_path):
    """mmengine's scalars.json as a segmentation run writes it (metric keys without a '/'),
    two attempts: a resumed attempt's record of an iteration replaces the first's."""
    first, second = tmp_path / '20260101_000000/vis_data', tmp_path / '20260101_000100/vis_data'
    for folder in (first, second):
        folder.mkdir(parents=True)
    first.joinpath('scalars.json').write_text(
        '{"lr": 0.1, "loss": 2.0, "time": 0.1, "step": 1}\n'
        '{"aAcc": 80.0, "mIoU": 20.0, "mAcc": 25.0, "data_time": 0.01, "time": 0.05, "step": 500}\n'
        '{"mIoU": 30.0, "time": 0.05, "step": 1000}\n')
    second.joinpath('scalars.json').write_text('{"mIoU": 31.0, "aAcc": 81.0, "step": 1000}\n')
    found = load_tool('tools/run_seeds.py').validations(str(tmp_path))
    assert found == {500: {'aAcc': 80.0, 'mIoU': 20.0, 'mAcc': 25.0},
                     1000: {'mIoU': 31.0, 'aAcc': 81.0}}


def test_seed_in_an_option_becomes_each_runs_seed(monkeypatch, tmp_path):
    """A two-stage recipe: each seed's second stage loads its own seed's first stage."""
    run_seeds = load_tool('tools/run_seeds.py')
    given = {}

    def fake_train_run(config, seed, out, work, threads=None, cfg_options=(), **kwargs):
        given[seed] = cfg_options
        return None  # as a failed training: main stops before the summary

    monkeypatch.setattr(run_seeds, 'train_run', fake_train_run)
    rc = run_seeds.main(['configs/detr_panoptic/detr_vit_shapes_panoptic.py', '--name', 'two',
                         '--seeds', '0', '2', '--results', str(tmp_path / 'r'), '--work-root',
                         str(tmp_path / 'w'), '--cfg-options',
                         'load_from=work_dirs/seeds/boxes/seed{seed}/iter_1600.pth',
                         'train_cfg.max_iters=8'])
    assert rc == 1
    assert given == {0: ['load_from=work_dirs/seeds/boxes/seed0/iter_1600.pth',
                         'train_cfg.max_iters=8'],
                     2: ['load_from=work_dirs/seeds/boxes/seed2/iter_1600.pth',
                         'train_cfg.max_iters=8']}
