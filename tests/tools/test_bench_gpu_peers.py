"""``benchmarks/bench_gpu_peers.py --device cpu --tiny`` runs end to end: the three pairs
(SegFormer-B0, DETR-R50, Deformable DETR-R50 against HF transformers on the same weights)
agree before anything is timed, every (model, step, precision) row lands in ``--json`` with
the provenance, and ``--budget-s`` stops starting rows but keeps the JSON. The times are not
checked (tiny sizes on the CPU)."""
import json
import os
import subprocess
import sys

import pytest

from tiny_run import REPO

SCRIPT = 'benchmarks/bench_gpu_peers.py'


def _run(*args):
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    return subprocess.run([sys.executable, SCRIPT, '--device', 'cpu', '--tiny', '--repeats', '1',
                           '--warmup', '0', *args], cwd=REPO, env=env, capture_output=True,
                          text=True)


def test_all_pairs_agree_and_every_row_is_kept(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    run = _run('--precisions', 'tf32', '--json', str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    r = data['results']
    assert SCRIPT + ' --device cpu --tiny' in data['provenance']['command']
    assert [(row['model'], row['step']) for row in r['rows']] == [
        ('SegFormer-B0', 'inference, batch 2'), ('SegFormer-B0', 'training, batch 2'),
        ('DETR-R50', 'inference, batch 1'), ('DETR-R50', 'training, batch 2'),
        ('Deformable DETR-R50', 'inference, batch 1'),
        ('Deformable DETR-R50', 'training, batch 2')]
    for row in r['rows']:
        assert max(row['rel_err']) < 1e-5  # random full-size weights, the same function
        assert row['densevit_img_s'] > 0 and row['hf_img_s'] > 0
    assert not r['skipped']


def test_conditional_detr_in_fp16_on_request(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    run = _run('--models', 'conditional_detr', '--precisions', 'fp16', '--json', str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())['results']['rows']
    assert [(r['model'], r['precision']) for r in rows] == [
        ('Conditional DETR-R50', 'fp16'), ('Conditional DETR-R50', 'fp16')]
    assert max(rows[0]['rel_err']) < 1e-5


def test_budget_stops_new_rows_and_keeps_the_json(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    run = _run('--models', 'segformer', 'detr', '--budget-s', '0', '--json', str(out))
    assert run.returncode == 1  # nothing measured
    r = json.loads(out.read_text())['results']
    assert r['rows'] == []
    assert [s['model'] for s in r['skipped']] == ['segformer', 'detr']


def test_no_gpu_is_one_clear_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip('a CUDA GPU is present')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, SCRIPT], cwd=REPO, env=env, capture_output=True,
                         text=True)
    assert run.returncode == 1
    assert 'no CUDA GPU' in run.stderr and 'Traceback' not in run.stderr


def test_vit_pair_agrees_and_compile_is_refused_for_the_detectors(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    run = _run('--models', 'vit', '--precisions', 'tf32', '--json', str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())['results']['rows']
    assert [(r['model'], r['step']) for r in rows] == [
        ('ViT-B/16', 'inference, batch 2'), ('ViT-B/16', 'training, batch 2')]
    assert max(rows[0]['rel_err']) < 1e-5
    run = _run('--models', 'vit', 'detr', '--compile')
    assert run.returncode == 2
    assert '--compile is measured for --models vit only' in run.stderr
    assert 'Traceback' not in run.stderr


def test_profiled_rows_keep_their_names_and_write_a_profile(tmp_path):
    pytest.importorskip('transformers')
    out, prof = tmp_path / 'bench.json', tmp_path / 'profiles'
    run = _run('--models', 'vit', '--precisions', 'tf32', '--json', str(out), '--profile-dir',
               str(prof), '--profile-above', '0')  # every row profiled
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())['results']['rows']
    assert [r['model'] for r in rows] == ['ViT-B/16', 'ViT-B/16']
    assert sorted(r['profile'] for r in rows) == sorted(p.name for p in prof.iterdir()) == [
        'profile_vit_inference_tf32.txt', 'profile_vit_training_tf32.txt']
    text = (prof / 'profile_vit_training_tf32.txt').read_text()
    assert '## densevit, 3 calls' in text and '## HF transformers, 3 calls' in text
