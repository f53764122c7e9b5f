"""Config mistakes that would otherwise be ignored silently (issue #14, item 2)."""
import pytest

from tiny_run import load_tool, write_config


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('tools/train.py')


def stderr_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_misspelt_top_level_keys_stop_before_anything_is_built(train_tool, tmp_path, capsys):
    """``optim_wraper`` / ``default_hook`` were ignored: training ran with the defaults."""
    config = write_config(tmp_path, extra="optim_wraper = dict(optimizer=dict(lr=0.5))\n"
                                          "default_hook = dict()\ncrop_size = (32, 32)\n")
    rc = train_tool.main([config, '--work-dir', str(tmp_path / 'w')])
    assert rc == 1
    lines = stderr_lines(capsys)
    assert len(lines) == 2  # crop_size, a config variable of its own, is not reported
    assert "unknown top-level config key 'optim_wraper'" in lines[0]
    assert "Did you mean 'optim_wrapper'?" in lines[0]
    assert "'default_hook'" in lines[1] and "'default_hooks'" in lines[1]
    assert not (tmp_path / 'w').exists()
