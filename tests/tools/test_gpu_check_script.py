"""tools/dev/gpu_check.sh's step selection, run on the CPU (``--skip gpus``): ``--only`` runs the
named steps alone and ``--tests`` gives pytest_rest the files to run."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'tools' / 'dev' / 'gpu_check.sh'


def _run(tmp_path, *args):
    env = dict(os.environ, PYTHON=sys.executable, RESERVE='0')
    return subprocess.run(['bash', str(SCRIPT), '--out', str(tmp_path / 'gc'), '--skip', 'gpus',
                           *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _rows(tmp_path):
    lines = (tmp_path / 'gc' / 'gpu_check_summary.txt').read_text().splitlines()
    rows = [line.split() for line in lines[1:]]
    return {r[0]: r[1] for r in rows if len(r) >= 3 and r[1] in ('PASS', 'FAIL', 'TIMEOUT', 'SKIP')}


def test_only_runs_the_named_step_with_the_listed_test_files(tmp_path):
    tests = tmp_path / 'tiny_tests'
    tests.mkdir()
    (tests / 'test_listed.py').write_text('def test_listed():\n    assert 2 + 2 == 4\n')
    (tests / 'test_not_listed.py').write_text('def test_not_listed():\n    assert False\n')
    listing = tmp_path / 'files.txt'
    listing.write_text(f'{tests / "test_listed.py"}\n')
    proc = _run(tmp_path, '--only', 'pytest_rest', '--tests', str(listing))
    rows = _rows(tmp_path)
    assert rows['pytest_rest'] == 'PASS', proc.stdout[-3000:]
    assert rows['gpus'] == 'SKIP'
    others = {name: result for name, result in rows.items() if name not in ('gpus', 'pytest_rest')}
    assert others and set(others.values()) == {'SKIP'}
    log = (tmp_path / 'gc' / 'logs' / 'pytest_rest.log').read_text()
    assert '::test_listed' in log and ' 1 passed' in log and 'test_not_listed' not in log


def test_an_empty_or_missing_test_list_is_refused_before_any_step(tmp_path):
    for listing in (tmp_path / 'missing.txt', tmp_path / 'empty.txt'):
        if listing.name == 'empty.txt':
            listing.write_text('')
        proc = _run(tmp_path, '--tests', str(listing))
        assert proc.returncode == 2
        assert proc.stderr.strip() == f'--tests {listing}: no such file, or it is empty'
        assert not (tmp_path / 'gc').exists()
