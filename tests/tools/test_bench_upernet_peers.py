"""``benchmarks/bench_upernet_peers.py --peer hf --tiny`` runs end to end: HF's UperNet-Swin
(random weights, saved with ``save_pretrained``) loaded into densevit's UperNet-Swin-T config
by ``init_model``, the two agreeing (decode logits, loss) before anything is timed, both
rows timed and ``--json`` holding them with the provenance. The times are not checked.
Bad arguments, and ``--peer mmseg`` outside the OpenMMLab reference environment, stop with
one clear error before anything is built."""
import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest

from densevit.utils.provenance import provenance

from tiny_run import REPO

SCRIPT = 'benchmarks/bench_upernet_peers.py'


def _run(*args):
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_hf_pair_runs_tiny(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    argv = ['--peer', 'hf', '--tiny', '--repeats', '1', '--json', str(out)]
    run = _run(*argv)
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    r = data['results']
    assert (r['peer'], r['tiny'], r['size'], r['threads']) == ('HF transformers', True,
                                                               [64, 64], 1)
    assert set(r['max_abs_diff']) == set(r['max_rel_err']) == {'logits', 'loss'}
    assert max(r['max_rel_err'].values()) <= 1e-4
    assert [row['what'] for row in r['rows']] == ['inference, 1 x 64x64',
                                                  'training step, 2 x 64x64']
    for row in r['rows']:
        assert row['densevit_ms'] > 0 and row['peer_ms'] > 0 and row['densevit_over_peer'] > 0
        assert f"| {row['what']} | {row['densevit_ms']:.1f} | {row['peer_ms']:.1f} |" in run.stdout
    assert set(data['provenance']) == set(provenance())
    assert shlex.split(data['provenance']['command'])[1:] == [SCRIPT, *argv]
    assert data['provenance']['torch_threads'] == 1


@pytest.mark.parametrize('args,message', [
    (['--peer', 'hf', '--size', '16', '64'], '--size must be at least 32 x 32'),
    (['--peer', 'hf', '--repeats', '0'], '--repeats and --threads must be at least 1'),
    (['--peer', 'detr'], "invalid choice: 'detr'")])
def test_bad_arguments_are_refused(args, message):
    run = _run(*args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert 'Traceback' not in run.stderr


@pytest.mark.skipif(importlib.util.find_spec('mmseg') is not None,
                    reason='MMSegmentation is installed here')
def test_mmseg_peer_outside_its_environment_is_one_clear_error():
    run = _run('--peer', 'mmseg', '--tiny')
    assert run.returncode == 2, run.stderr
    assert '--peer mmseg runs in the OpenMMLab reference environment' in run.stderr
    assert 'Traceback' not in run.stderr
