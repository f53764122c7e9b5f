"""``benchmarks/bench_detr_peers.py --peer hf --model conditional_detr / dab_detr`` runs end to
end at a tiny image size (full-size models, one repeat): HF's model re-drawn, saved with
``save_pretrained`` and loaded by ``init_model``, both agreeing before anything is timed,
and ``--json`` holding the printed rows with the provenance. The times are not checked."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from densevit.utils.provenance import provenance

from tiny_run import REPO

SCRIPT = 'benchmarks/bench_detr_peers.py'


def _run(*args):
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, env=env,
                          capture_output=True, text=True)


@pytest.mark.parametrize('model,name', [('conditional_detr', 'Conditional DETR-R50'),
                                        ('dab_detr', 'DAB-DETR-R50')])
def test_hf_pair_runs_at_a_tiny_size(tmp_path, model, name):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    argv = ['--peer', 'hf', '--model', model, '--size', '64', '96', '--repeats', '1',
            '--threads', '1', '--json', str(out)]
    run = _run(*argv)
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    r = data['results']
    assert (r['model'], r['peer']) == (name, 'HF transformers')
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
    (['--peer', 'mmdet', '--model', 'dab_detr'], '--peer mmdet has --model detr, not dab_detr'),
    (['--peer', 'mmdet', '--model', 'deformable_detr'], 'not deformable_detr'),
    (['--peer', 'hf', '--size', '16', '96'], '--size must be at least 32 x 32')])
def test_bad_arguments_are_refused(args, message):
    run = _run(*args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
