"""densevit.utils.moved.forward and the forwarders left at tools/analysis/ for benchmarks/."""
import sys
from pathlib import Path

import pytest

from densevit.utils.moved import forward

REPO = Path(__file__).resolve().parents[2]
MOVED = ['bench_memory', 'bench_backbones', 'bench_deform_attn', 'matcher_share', 'dist_scaling']


def test_forward_runs_new_script_with_same_arguments(tmp_path, monkeypatch, capsys):
    (tmp_path / 'new').mkdir()
    (tmp_path / 'old' / 'deeper').mkdir(parents=True)
    (tmp_path / 'new' / 'tool.py').write_text(
        'import sys\nprint(__name__, sys.argv)\nsys.exit(int(sys.argv[-1]))\n')
    old = tmp_path / 'old' / 'deeper' / 'tool.py'
    monkeypatch.setattr(sys, 'argv', [str(old), '--flag', '3'])
    with pytest.raises(SystemExit) as exit_info:
        forward(str(old), 'new/tool.py')
    assert exit_info.value.code == 3  # the new script's exit status passes through
    out, err = capsys.readouterr()
    assert out == f"__main__ {[str(tmp_path / 'new' / 'tool.py'), '--flag', '3']}\n"
    assert err == ('old/deeper/tool.py has moved to new/tool.py; '
                   'this path forwards until the next release\n')


def test_forward_names_a_missing_target(tmp_path):
    with pytest.raises(FileNotFoundError, match='nowhere/tool.py'):
        forward(str(tmp_path / 'tool.py'), 'nowhere/tool.py')


@pytest.mark.parametrize('name', MOVED)
def test_old_benchmark_paths_forward(name):
    old = REPO / 'tools' / 'analysis' / f'{name}.py'
    assert f"forward(__file__, 'benchmarks/{name}.py')" in old.read_text()
    assert (REPO / 'benchmarks' / f'{name}.py').is_file()


def test_moved_config_paths_resolve(monkeypatch, capsys):
    from densevit.utils.moved import resolve_config
    monkeypatch.chdir(REPO)
    old = 'configs/vit_pe/detr_vit_shapes_pe-none.py'
    assert resolve_config(old) == 'configs/studies/vit_pe/detr_vit_shapes_pe-none.py'
    assert 'configs/vit_pe/ has moved to configs/studies/vit_pe/' in capsys.readouterr().err
    absolute = str(REPO / 'configs/quickstart/seg_trials/whole_96.py')
    assert resolve_config(absolute) == str(REPO / 'configs/studies/seg_trials/whole_96.py')
    assert 'has moved to configs/studies/seg_trials/' in capsys.readouterr().err
    # existing and unknown paths come back unchanged, silently
    for path in ('configs/detr_vit.py', 'configs/vit_pe/no_such_config.py', 'x/y.py'):
        assert resolve_config(path) == path
    assert capsys.readouterr().err == ''


def test_train_curve_forwards_to_train_and_plot_curves():
    from tiny_run import load_tool
    old = load_tool('tools/analysis/train_curve.py')
    assert old.new_command(['c.py', '--minutes', '5', '--cfg-options', 'a=1']) == (
        'tools/train.py', ['c.py', '--minutes', '5', '--cfg-options', 'a=1',
                           '--eval-every', '2', '--work-dir', 'work_dirs/train_curve'])
    assert old.new_command(['c.py', '--out', 'x.png', '--work-dir', 'w']) == (
        'tools/train.py', ['c.py', '--work-dir', 'w', '--minutes', '20', '--eval-every', '2'])
    assert old.new_command(['c.py', '--minutes=5', '--out=x.png', '--work-dir=w']) == (
        'tools/train.py', ['c.py', '--minutes=5', '--work-dir=w', '--eval-every', '2'])
    assert old.new_command(['--plot-only', 'a', 'b', '--out', 'x.png']) == (
        'tools/analysis/plot_curves.py', ['a', 'b', '--out', 'x.png'])
