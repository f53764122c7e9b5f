"""``benchmarks/bench_backbones.py --tiny`` runs end to end: every pair (ViT, Swin, DINOv2
with and without registers, DINOv3, BEiT, CLIP, ViTDet, SAM's encoder against HF
transformers on the same converted weights) agrees within 1e-4 before it is timed, and
every row lands in ``--json`` with the provenance. The times are not checked beyond being
positive (tiny sizes)."""
import json
import os
import subprocess
import sys

import pytest

from tiny_run import REPO

SCRIPT = 'benchmarks/bench_backbones.py'
PAIRS = [('ViT-B/16', 224), ('ViT-B/16', 512), ('Swin-T', 224), ('DINOv2 ViT-B/14', 224),
         ('DINOv2 ViT-B/14 + 4 registers', 224), ('DINOv3 ViT-B/16', 224), ('BEiT-B/16', 224),
         ('CLIP ViT-B/16', 224), ('ViTDet ViT-B/16', 512), ('SAM ViT-B/16 encoder', 512)]


def test_every_pair_agrees_and_is_timed(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'bench.json'
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')])))
    run = subprocess.run([sys.executable, SCRIPT, '--tiny', '--repeats', '1', '--json', str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert SCRIPT + ' --tiny --repeats 1' in data['provenance']['command']
    assert data['provenance']['commit'] is None or len(data['provenance']['commit']) == 40
    assert data['repeats'] == 1
    r = data['results']
    assert r['tiny'] is True
    assert [(row['model'], row['input']) for row in r['vs_hf']] == PAIRS
    for row in r['vs_hf']:
        assert 0 <= row['max_rel_err'] <= 1e-4, row
        assert row['densevit_ms'] > 0 and row['hf_ms'] > 0 and row['hf_over_densevit'] > 0, row
        assert row['hf_attention'] in ('sdpa', 'eager'), row
    rel = r['relative_position']
    assert rel['plain_ms'] > 0 and rel['relative_ms'] > 0
    assert 'not timed' not in run.stdout and 'INFO' not in run.stdout
