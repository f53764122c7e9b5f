"""``--json FILE`` of the measuring scripts: the numbers they print, with the provenance of
``densevit.utils.provenance`` (command, commit, CPU, threads)."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from densevit.utils.provenance import provenance

from tiny_run import REPO, TINY_CONFIG, load_tool

PROVENANCE_KEYS = set(provenance())


def test_get_flops_json_holds_the_printed_counts(tmp_path):
    # a real process: the command recorded is the one that ran, paths relative to the repo
    out = tmp_path / 'results' / 'flops.json'
    config = TINY_CONFIG.relative_to(REPO).as_posix()
    argv = ['tools/analysis/get_flops.py', config, '--shape', '48', '64', '--json', str(out)]
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    printed = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True,
                             text=True, check=True).stdout
    data = json.loads(out.read_text())

    flops, params = (int(re.search(rf'{name}: \S+ \(([\d,]+)\)', printed)[1].replace(',', ''))
                     for name in ('FLOPs', 'parameters'))
    r = data['results']
    assert (r['flops'], r['params'], r['input_shape']) == (flops, params, [1, 3, 48, 64])
    assert f"FLOPs: {r['flops_str']}" in printed and f"parameters: {r['params_str']}" in printed
    assert sum(r['by_operator'].values()) == flops
    # the children's counts: all but what DETR's own forward runs (its padding mask resize)
    assert 0 <= flops - sum(r['by_module'].values()) < 100 and r['by_module']['backbone'] > 0
    assert data['config'] == config

    p = data['provenance']
    assert set(p) == PROVENANCE_KEYS
    assert shlex.split(p['command'])[1:] == argv
    assert p['torch_threads'] == 1 and p['omp_num_threads'] == '1'
    if (REPO / '.git').exists():
        assert p['commit'] == subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO,
                                             capture_output=True, text=True).stdout.strip()


def fake_run(work_dir, records):
    log = Path(work_dir) / '20260101_000000' / 'vis_data' / 'scalars.json'
    log.parent.mkdir(parents=True)
    log.write_text(''.join(json.dumps(r) + '\n' for r in records))


def test_plot_curves_json_holds_the_table(tmp_path, capsys, monkeypatch):
    fake_run(tmp_path / 'a', [dict(step=5, loss=1.0), dict(step=10, **{
        'coco/bbox_mAP_50': 0.123456, 'coco/bbox_mAP': 0.05}), dict(step=20, **{
            'coco/bbox_mAP_50': 0.5, 'coco/bbox_mAP': 0.25})])
    fake_run(tmp_path / 'b', [dict(step=20, mIoU=41.23456, mAcc=50.0)])
    argv = [str(tmp_path / 'a'), str(tmp_path / 'b'), '--x', 'iter', '--table',
            '--out', str(tmp_path / 'c.png'), '--json', str(tmp_path / 'c.json')]
    monkeypatch.setattr(sys, 'argv', ['tools/analysis/plot_curves.py', *argv])
    assert load_tool('tools/analysis/plot_curves.py').main(argv) == 0
    table = [line.strip('|').split('|') for line in capsys.readouterr().out.splitlines()
             if line.startswith('| ') and not line.startswith('| run')]
    data = json.loads((tmp_path / 'c.json').read_text())
    runs = data['results']
    assert [r['run'] for r in runs] == ['a', 'b'] and data['x'] == 'iter'
    assert [r['metric'] for r in runs] == ['coco/bbox_mAP_50', 'mIoU']
    assert runs[0]['x'] == [10.0, 20.0] and runs[0]['values'] == [0.123456, 0.5]
    assert runs[1]['x'] == [20.0] and runs[1]['values'] == [41.23456]
    # the printed table (columns 10, 20) holds the same numbers, rounded
    printed = {cells[0].strip(): [c.strip() for c in cells[2:]] for cells in table}
    assert printed == {'a': [f'{v:.4g}' for v in runs[0]['values']],
                       'b': ['', f"{runs[1]['values'][0]:.4g}"]}
    assert set(data['provenance']) == PROVENANCE_KEYS
    assert shlex.split(data['provenance']['command'])[1] == 'tools/analysis/plot_curves.py'
