"""``benchmarks/bench_vit_train_memory.py --device cpu`` end to end at a tiny size: every
variant x checkpointing x precision is a row, the steps run (times, ratios), the JSON holds
them; on the CPU no peak memory is claimed."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = 'benchmarks/bench_vit_train_memory.py'


def test_cpu_run_writes_every_row(tmp_path):
    out = tmp_path / 'mem.json'
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS='1')
    run = subprocess.run(
        [sys.executable, SCRIPT, '--device', 'cpu', '--arch', 'Ti', '--size', '64',
         '--repeats', '2', '--precisions', 'tf32', 'bf16', '--json', str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())['results']
    got = [(r['precision'], r['variant'], r['with_cp']) for r in rows]
    assert got == [(p, v, cp) for p in ('tf32', 'bf16')
                   for v in ('global', 'global_relpos', 'windowed') for cp in (False, True)]
    for r in rows:
        assert r['peak_mib'] is None and r['step_s'] > 0
        if r['variant'] == 'global' and not r['with_cp']:
            assert r['time_vs_first'] == 1.0
    assert 'ViT-Ti/16 64x64, batch 1, cpu' in run.stdout
