"""``benchmarks/bench_detr_peers.py --peer hf --model conditional_detr / dab_detr`` runs end to
end at a tiny image size (full-size models, one repeat): HF's model re-drawn, saved with
``save_pretrained`` and loaded by ``init_model``, both agreeing before anything is timed,
and ``--json`` holding the printed rows with the provenance. The times are not checked.
``--peer mmdet --model dino`` likewise (100 queries), where mmdet is importable (the OpenMMLab
reference environment, tools/dev/openmmlab_fixtures; skipped elsewhere)."""
import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest

from densevit.utils.provenance import provenance

from tiny_run import REPO

SCRIPT = 'benchmarks/bench_detr_peers.py'


def _run(*args, path=()):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), *map(str, path), os.environ.get('PYTHONPATH')])))
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, env=env,
                          capture_output=True, text=True)


@pytest.mark.parametrize('peer,model,name', [
    ('hf', 'conditional_detr', 'Conditional DETR-R50'), ('hf', 'dab_detr', 'DAB-DETR-R50'),
    ('mmdet', 'dino', 'DINO-4scale-R50')])
def test_pair_runs_at_a_tiny_size(tmp_path, peer, model, name):
    if importlib.util.find_spec({'hf': 'transformers', 'mmdet': 'mmdet'}[peer]) is None:
        pytest.skip(f'{peer} is not installed')
    out = tmp_path / 'bench.json'
    argv = ['--peer', peer, '--model', model, '--size', '64', '96', '--repeats', '1',
            '--threads', '1', '--json', str(out)]
    if model == 'dino':  # 900 queries need more pixels than 64x96 has
        argv[-2:-2] = ['--queries', '100']
    run = _run(*argv, path=[REPO / 'tools/dev/openmmlab_fixtures'] if peer == 'mmdet' else [])
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    r = data['results']
    assert (r['model'], r['peer']) == (name, {'hf': 'HF transformers',
                                              'mmdet': 'MMDetection 3.3'}[peer])
    assert max(r['max_abs_diff'].values()) <= 1e-4  # random full-size weights, same function
    assert r['sizes'] == [[64, 96], [59, 92]]
    assert [row['what'] for row in r['rows']] == ['inference, 1 x 64x96', 'training step, batch 2']
    for row in r['rows']:
        assert row['densevit_ms'] > 0 and row['peer_ms'] > 0 and row['densevit_over_peer'] > 0
        assert f"| {row['what']} | {row['densevit_ms']:.0f} | {row['peer_ms']:.0f} |" in run.stdout
    assert set(data['provenance']) == set(provenance())
    assert shlex.split(data['provenance']['command'])[1:] == [SCRIPT, *argv]
    assert data['provenance']['torch_threads'] == 1


@pytest.mark.parametrize('args,message', [
    (['--peer', 'mmdet', '--model', 'dab_detr'],
     '--peer mmdet has --model detr, dino, not dab_detr'),
    (['--peer', 'mmdet', '--model', 'deformable_detr'], 'not deformable_detr'),
    (['--peer', 'hf', '--model', 'dino'], '--peer hf has --model deformable_detr, detr, '
                                          'conditional_detr, dab_detr, not dino'),
    (['--peer', 'mmdet', '--queries', '100'], '--queries is for --model dino'),
    (['--peer', 'mmdet', '--model', 'dino', '--size', '64', '96'],
     'gives DINO 128 pixels to choose 900 queries among'),
    (['--peer', 'hf', '--size', '16', '96'], '--size must be at least 32 x 32')])
def test_bad_arguments_are_refused(args, message):
    run = _run(*args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
