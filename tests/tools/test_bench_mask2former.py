"""``benchmarks/bench_mask2former.py --tiny`` end to end: the HF pair agrees before it is timed,
both steps are timed, each side's training memory is measured in its own process, the JSON keeps
it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_writes_speed_and_memory(tmp_path):
    pytest.importorskip('transformers')
    out = tmp_path / 'mask2former.json'
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS='1')
    run = subprocess.run([sys.executable, 'benchmarks/bench_mask2former.py', '--tiny',
                          '--repeats', '1', '--json', str(out)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    r = json.loads(out.read_text())['results']
    assert r['speed']['max_rel_err'] <= 1e-4
    for step in ('inference', 'training'):
        assert r['speed'][step]['densevit_ms'] > 0 and r['speed'][step]['hf_ms'] > 0
    for side in ('densevit', 'hf'):
        assert r['memory'][side]['side'] == side and r['memory'][side]['seconds'] > 0
        assert r['memory'][side]['growth_mib'] >= 0
