"""TrainingClockHook through tools/train.py --minutes: validate on a clock, stop on budget."""
import csv
from types import SimpleNamespace

import cv2
import pytest

from densevit.engine.training_clock_hook import TrainingClockHook

from tiny_run import load_tool, scalar_records, unique_names, write_config

BUDGET_MIN, EVERY_MIN = 0.03, 0.005  # 1.8 s of training, validating every 0.3 s


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_clock_validates_and_stops_on_budget(tmp_path, train_tool):
    work_dir = tmp_path / 'curve'
    rc = train_tool.main([write_config(tmp_path), '--minutes', str(BUDGET_MIN),
                           '--eval-every', str(EVERY_MIN), '--work-dir', str(work_dir),
                           '--cfg-options', *unique_names()])
    assert rc == 0

    rows = read_rows(work_dir / 'training_clock.csv')
    assert len(rows) >= 2
    assert {'minutes', 'iter', 'coco/bbox_mAP', 'coco/bbox_mAP_50'} <= set(rows[0])
    minutes = [float(r['minutes']) for r in rows]
    iters = [int(r['iter']) for r in rows]
    assert minutes == sorted(minutes) and len(set(minutes)) == len(minutes)
    assert iters == sorted(iters) and len(set(iters)) == len(iters)
    assert minutes[0] >= EVERY_MIN
    # the last validation is the one at the budget, and then training stopped by itself
    assert BUDGET_MIN <= minutes[-1] < BUDGET_MIN + 0.02
    # each row is a validation the log records too; the row counts the iterations done,
    # the log's step is mmengine's runner.iter, which inside after_train_iter (where the
    # clock validates) has not counted the last one yet: one less
    val = {r['step']: r['coco/bbox_mAP_50'] for r in scalar_records(work_dir)
           if 'coco/bbox_mAP_50' in r}
    assert sorted(val) == [i - 1 for i in iters]
    assert [float(r['coco/bbox_mAP_50']) for r in rows] == pytest.approx(
        [val[i - 1] for i in iters], abs=1e-4)
    # a checkpoint where the clock stopped (the loop's own limit is lifted), named by
    # last_checkpoint so that --resume finds it
    last = max(work_dir.glob('iter_*.pth'), key=lambda p: int(p.stem.split('_')[1]))
    stopped_at = int(last.stem.split('_')[1])
    assert iters[-1] <= stopped_at < 10 ** 4
    assert (work_dir / 'last_checkpoint').read_text().strip() == last.name  # relative

    curve = cv2.imread(str(work_dir / 'curve.png'))
    assert curve is not None and curve.shape[0] > 100 and curve.shape[1] > 100


def test_clock_options_need_minutes(train_tool, capsys):
    with pytest.raises(SystemExit):
        train_tool.parse_args(['cfg.py', '--eval-every', '2'])
    assert '--eval-every and --stop-at go with --minutes' in capsys.readouterr().err


def test_plot_curves_draws_several_runs(tmp_path):
    for name, ap in [('a', 0.2), ('b', 0.4)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / 'training_clock.csv').write_text(
            'minutes,iter,coco/bbox_mAP,coco/bbox_mAP_50\n'
            f'1.0,10,{ap / 2},{ap}\n2.0,20,{ap},{2 * ap}\n')
    out = tmp_path / 'both.png'
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    assert plot_tool.main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--out', str(out)]) == 0
    assert cv2.imread(str(out)) is not None
    # a folder without a table: one clear line, no traceback
    assert plot_tool.main([str(tmp_path), '--out', str(out)]) == 1


def test_plot_curves_against_iterations(tmp_path):
    """Any tools/train.py work dir: validation records of scalars.json; a resumed run's
    record replaces the first run's at the same iteration."""
    from densevit.visualization.training_curve import read_val_records
    for stamp, records in [('20260101_000000', [(100, 20.0), (200, 40.0)]),
                           ('20260101_010000', [(200, 45.0), (300, 60.0)])]:
        (tmp_path / 'run' / stamp / 'vis_data').mkdir(parents=True)
        lines = [f'{{"loss": 1.0, "step": {s - 50}}}' for s, _ in records]
        lines += [f'{{"mIoU": {m}, "mAcc": {m + 5}, "step": {s}}}' for s, m in records]
        (tmp_path / 'run' / stamp / 'vis_data' / 'scalars.json').write_text('\n'.join(lines))
    rows = read_val_records(tmp_path / 'run')
    assert [(r['iter'], r['mIoU']) for r in rows] == [(100, 20.0), (200, 45.0), (300, 60.0)]
    out = tmp_path / 'iters.png'
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    assert plot_tool.main([str(tmp_path / 'run'), '--x', 'iter', '--labels', 'seed 0',
                           '--out', str(out)]) == 0
    assert cv2.imread(str(out)) is not None


def test_plot_curves_table(tmp_path, capsys):
    """--table: a row per run, a column per validated iteration, blank where a run has none."""
    for name, records in [('a', [(100, 20.0), (200, 40.0)]), ('b', [(200, 45.5)])]:
        (tmp_path / name / '20260101_000000' / 'vis_data').mkdir(parents=True)
        (tmp_path / name / '20260101_000000' / 'vis_data' / 'scalars.json').write_text(
            '\n'.join(f'{{"mIoU": {m}, "mAcc": 1.0, "step": {s}}}' for s, m in records))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    assert plot_tool.main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--x', 'iter', '--table',
                           '--out', str(tmp_path / 't.png')]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == ['(columns: iteration)', '| run | metric | 100 | 200 |', '|---|---|---|---|',
                       '| a | mIoU | 20 | 40 |', '| b | mIoU |  | 45.5 |']


def test_plot_curves_tables_pq_of_a_mask_classifier(tmp_path, capsys):
    """A run that logs PQ and mIoU together (EoMT, Mask2Former) is tabled by its PQ."""
    run = tmp_path / 'pan' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    (run / 'scalars.json').write_text('\n'.join(
        f'{{"coco_panoptic/PQ": {pq}, "mIoU": {m}, "step": {s}}}'
        for s, pq, m in [(100, 12.5, 30.0), (200, 25.0, 41.0)]))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    assert plot_tool.main([str(tmp_path / 'pan'), '--x', 'iter', '--table',
                           '--out', str(tmp_path / 'p.png')]) == 0
    assert '| pan | coco_panoptic/PQ | 12.5 | 25 |' in capsys.readouterr().out.splitlines()


class _Clock:
    """A stand-in for time.perf_counter, advanced by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def fake_runner(tmp_path, on_val):
    runner = SimpleNamespace(iter=0, work_dir=str(tmp_path), info={})
    runner.message_hub = SimpleNamespace(update_info=runner.info.__setitem__)
    runner.train_loop = SimpleNamespace(stop_training=False)
    runner.val_loop = SimpleNamespace(run=on_val)
    runner.model = SimpleNamespace(train=lambda: None)
    return runner


def test_validation_time_is_not_training_time(tmp_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr('densevit.engine.training_clock_hook.time.perf_counter', clock)
    hook = TrainingClockHook(budget_minutes=3, eval_every_minutes=1)

    def validate():  # what ValLoop.run calls on the hooks; takes 10 minutes
        hook.before_val(runner)
        clock.now += 600
        hook.after_val_epoch(runner, dict(ap=0.5))
        hook.after_val(runner)

    runner = fake_runner(tmp_path, validate)
    hook.before_train(runner)
    etas = []
    for _ in range(8):  # 8 iterations of 30 s: validation at 1, 2 and 3 minutes, then stop
        clock.now += 30
        hook.after_train_iter(runner, runner.iter)
        etas.append(runner.info['eta'])
        if runner.train_loop.stop_training:
            break
        runner.iter += 1
    # training left + validations due (1 and 2 min, 2 and 3, 3, 3), each as long as the
    # last one (none yet: 0 s; then 600 s): no iteration limit enters
    assert etas == [150, 120 + 2 * 600, 90 + 2 * 600, 60 + 1 * 600, 30 + 600, 0 + 600]
    assert [r['minutes'] for r in hook.rows] == [1.0, 2.0, 3.0]
    assert runner.train_loop.stop_training and hook.train_seconds == pytest.approx(180)
    rows = read_rows(tmp_path / 'training_clock.csv')
    assert [float(r['ap']) for r in rows] == [0.5] * 3


def test_clock_is_one_process(train_tool, capsys):
    with pytest.raises(SystemExit):
        train_tool.parse_args(['cfg.py', '--minutes', '1', '--launcher', 'pytorch'])
    assert '--minutes trains one process' in capsys.readouterr().err


def test_plot_curves_refuses_what_it_cannot_draw(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'training_clock.csv').write_text('minutes,iter,mDice\n1.0,10,0.5\n')
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    out = str(tmp_path / 'x.png')
    assert plot_tool.main([str(tmp_path / 'a'), '--out', out]) == 1  # no metric it knows
    assert plot_tool.main([str(tmp_path / 'a'), '--labels', 'x', 'y', '--out', out]) == 1


def test_plot_curves_reads_a_kept_metrics_file_as_its_work_dir(tmp_path, capsys):
    """tools/run_seeds.py's seedS.json stands for a run whose work dir is gone: the same
    table as the work dir's own records; minutes, or a file without validations, refused."""
    import json
    run = tmp_path / 'seed0' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    (run / 'scalars.json').write_text('\n'.join(
        ['{"loss": 2.0, "step": 50}'] + [f'{{"coco_panoptic/PQ": {pq}, "mIoU": {m}, "step": {s}}}'
                                         for s, pq, m in [(100, 12.5, 30.0), (200, 25.0, 41.0)]]))
    run_seeds = load_tool('tools/run_seeds.py')
    kept = tmp_path / 'seed0.json'
    kept.write_text(json.dumps(dict(results=dict(
        seed=0, validations=run_seeds.validations(str(tmp_path / 'seed0'))))))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    tables = []
    for source in (tmp_path / 'seed0', kept):
        assert plot_tool.main([str(source), '--x', 'iter', '--table', '--labels', 's0',
                               '--out', str(tmp_path / 'k.png')]) == 0
        tables.append(capsys.readouterr().out.splitlines()[:4])
    assert tables[0] == tables[1]
    assert tables[1][3] == '| s0 | coco_panoptic/PQ | 12.5 | 25 |'
    assert plot_tool.main([str(kept), '--out', str(tmp_path / 'm.png')]) == 1  # minutes
    empty = tmp_path / 'empty.json'
    empty.write_text('{"results": {}}')
    assert plot_tool.main([str(empty), '--x', 'iter', '--out', str(tmp_path / 'e.png')]) == 1
    assert 'not a tools/run_seeds.py metrics file' in capsys.readouterr().err


def test_plot_curves_draws_pq_of_a_run_logging_pq_and_box_ap(tmp_path, capsys):
    """DETR panoptic logs PQ with box AP and no mIoU: its main metric is PQ, and the
    missing companion is left out (not a KeyError)."""
    run = tmp_path / 'detr_pan' / '20260101_000000' / 'vis_data'
    run.mkdir(parents=True)
    (run / 'scalars.json').write_text('\n'.join(
        f'{{"coco/bbox_mAP_50": {b}, "coco/bbox_mAP": {b / 2}, "coco_panoptic/PQ": {pq}, '
        f'"step": {s}}}' for s, b, pq in [(200, 0.1, 2.5), (400, 0.2, 7.0)]))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    out = tmp_path / 'd.png'
    assert plot_tool.main([str(tmp_path / 'detr_pan'), '--x', 'iter', '--table',
                           '--out', str(out)]) == 0
    assert '| detr_pan | coco_panoptic/PQ | 2.5 | 7 |' in capsys.readouterr().out.splitlines()
    assert cv2.imread(str(out)) is not None


def test_plot_curves_draws_training_log_scalars(tmp_path, capsys):
    """--keys: training-log scalars against iterations (MMDetection's analyze_logs.py
    plot_curve --keys); a resumed run's records replace the first's at the same iteration,
    validation records are not training ones, and a key the log lacks is refused."""
    import json
    for stamp, records in [('20260101_000000', [(20, 6.6, 6.1), (40, 6.7, 6.4)]),
                           ('20260101_010000', [(40, 6.75, 6.5), (60, 6.8, 6.6)])]:
        (tmp_path / 'run' / stamp / 'vis_data').mkdir(parents=True)
        lines = [json.dumps(dict(loss=lo, teacher_entropy=h, time=1.0, step=s))
                 for s, lo, h in records]
        lines.append(json.dumps({'pretrain/objective': 6.9, 'time': 0.5,
                                 'step': records[-1][0]}))
        (tmp_path / 'run' / stamp / 'vis_data' / 'scalars.json').write_text('\n'.join(lines))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    out, kept = tmp_path / 'log.png', tmp_path / 'log.json'
    assert plot_tool.main([str(tmp_path / 'run'), '--x', 'iter', '--keys', 'teacher_entropy',
                           'loss', '--table', '--out', str(out), '--json', str(kept)]) == 0
    assert '| run | teacher_entropy | 6.1 | 6.5 | 6.6 |' in capsys.readouterr().out.splitlines()
    assert cv2.imread(str(out)) is not None
    run, = json.loads(kept.read_text())['results']
    assert (run['metric'], run['x'], run['values']) == ('teacher_entropy', [20.0, 40.0, 60.0],
                                                        [6.1, 6.5, 6.6])
    assert run['companion'] == dict(metric='loss', x=[20.0, 40.0, 60.0], values=[6.6, 6.75, 6.8])
    assert plot_tool.main([str(tmp_path / 'run'), '--x', 'iter', '--keys', 'time', '--json',
                           str(kept), '--out', str(out)]) == 0
    # the validation records' time (0.5 at iterations 40 and 60) is not the training step's
    assert json.loads(kept.read_text())['results'][0]['values'] == [1.0, 1.0, 1.0]
    assert plot_tool.main([str(tmp_path / 'run'), '--x', 'iter', '--keys', 'loss_cls',
                           '--out', str(out)]) == 1
    err = capsys.readouterr().err
    assert ('no loss_cls in its training log; it has loss, pretrain/objective, teacher_entropy, '
            'time') in err, err
    assert plot_tool.main([str(tmp_path / 'run'), '--keys', 'loss', '--out', str(out)]) == 1
    assert '(use --x iter)' in capsys.readouterr().err


def test_plot_curves_group_gives_a_configs_seeds_one_colour(tmp_path, monkeypatch):
    """--group 2 on four runs (two configs, two seeds each): runs 0-1 share a colour, 2-3
    another, and the two seeds of a config differ in marker."""
    import json

    from matplotlib.axes import Axes
    drawn = []
    real_plot = Axes.plot

    def recording_plot(self, *args, **kwargs):
        lines = real_plot(self, *args, **kwargs)
        drawn.append((kwargs['label'], lines[0].get_color(), lines[0].get_marker()))
        return lines

    monkeypatch.setattr(Axes, 'plot', recording_plot)
    files = []
    for i in range(4):
        f = tmp_path / f'run{i}.json'
        f.write_text(json.dumps(dict(results=dict(seed=i % 2, validations={
            '100': {'mIoU': 10.0 + i}, '200': {'mIoU': 20.0 + i}}))))
        files.append(str(f))
    plot_tool = load_tool('tools/analysis/plot_curves.py')
    assert plot_tool.main([*files, '--x', 'iter', '--group', '2', '--labels', 'a0', 'a1',
                           'b0', 'b1', '--out', str(tmp_path / 'g.png')]) == 0
    mains = {label.split()[0]: (color, marker) for label, color, marker in drawn
             if label.endswith('mIoU')}
    assert mains['a0'][0] == mains['a1'][0] != mains['b0'][0] == mains['b1'][0]
    assert mains['a0'][1] != mains['a1'][1] and mains['b0'][1] != mains['b1'][1]
    assert plot_tool.main([*files, '--x', 'iter', '--group', '0',
                           '--out', str(tmp_path / 'z.png')]) == 1
