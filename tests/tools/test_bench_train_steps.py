"""``benchmarks/bench_train_steps.py`` on two tiny configs: every config gets a row with its
iterations per second, the first config's ratio is 1, ``--json`` keeps the rows with the
provenance, and a wrong argument is one clear error. The times are not checked."""
import json
import subprocess
import sys

from tiny_run import REPO, subprocess_env, write_config

SCRIPT = 'benchmarks/bench_train_steps.py'


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, env=subprocess_env())


def test_rows_for_every_config(tmp_path):
    a = write_config(tmp_path, name='a.py')
    b = write_config(tmp_path, name='b.py', extra='model = dict(bbox_head=dict(num_queries=7))\n')
    out = tmp_path / 'steps.json'
    run = _run(str(a), str(b), '--steps', '2', '--threads', '1', '--json', str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())['results']['rows']
    assert [r['config'] for r in rows] == [str(a), str(b)]
    assert rows[0]['over_first'] == 1.0
    for r in rows:
        assert r['iterations_per_s'] > 0 and r['batch'] >= 1
        assert f"| {r['config']} | {r['batch']} |" in run.stdout


def test_bad_arguments_are_refused(tmp_path):
    run = _run(str(tmp_path / 'missing.py'))
    assert run.returncode == 2 and 'no such config' in run.stderr
    run = _run(str(write_config(tmp_path)), '--steps', '0')
    assert run.returncode == 2 and '--steps must be at least 1' in run.stderr
