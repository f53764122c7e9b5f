"""tools/slurm_*.sh hand srun the right arguments (a fake srun records them); every launch
script refuses to run without its arguments. tools/dist_*.sh run for real in
tests/engine/test_distributed.py."""
import os
import subprocess
from pathlib import Path

import pytest

from tiny_run import REPO

FAKE_SRUN = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$SRUN_LOG"
echo "PYTHONPATH=$PYTHONPATH" >> "$SRUN_LOG"
"""


def run(script, *args, env=None):
    return subprocess.run(['bash', str(REPO / 'tools' / script), *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize('script', ['dist_train.sh', 'dist_test.sh', 'slurm_train.sh',
                                    'slurm_test.sh'])
def test_usage_without_arguments(script):
    proc = run(script)
    assert proc.returncode == 2 and proc.stderr.startswith('usage:')


@pytest.mark.parametrize('script,last', [('slurm_train.sh', ['--work-dir', 'wd']),
                                         ('slurm_test.sh', ['model.pth'])])
def test_slurm_scripts_call_srun_with_the_slurm_launcher(tmp_path, script, last):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'srun').write_text(FAKE_SRUN)
    (bin_dir / 'srun').chmod(0o755)
    log = tmp_path / 'srun.txt'
    env = dict(os.environ, PATH=f'{bin_dir}:{os.environ["PATH"]}', SRUN_LOG=str(log), GPUS='16',
               SRUN_ARGS='--quotatype=auto -x node3')
    target = 'wd' if script == 'slurm_train.sh' else 'model.pth'
    proc = run(script, 'gpu_part', 'job1', 'cfg.py', target, '--cfg-options', 'a=1', env=env)
    assert proc.returncode == 0, proc.stderr
    args = log.read_text().splitlines()
    assert args[:9] == ['-p', 'gpu_part', '--job-name=job1', '--gres=gpu:8', '--ntasks=16',
                        '--ntasks-per-node=8', '--cpus-per-task=5', '--kill-on-bad-exit=1',
                        '--quotatype=auto']
    tool = 'train.py' if script == 'slurm_train.sh' else 'test.py'
    i = args.index(str(REPO / 'tools' / tool))
    assert args[i + 1] == 'cfg.py' and args[i + 2:i + 2 + len(last)] == last
    assert args[-5:-1] == ['--launcher', 'slurm', '--cfg-options', 'a=1']
    assert args[-1].startswith(f'PYTHONPATH={REPO}')
    assert Path(REPO / 'tools' / script).stat().st_mode & 0o111  # executable
