"""Config mistakes that would otherwise be ignored silently."""
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


@pytest.mark.parametrize('options, expected', [
    (['model.backbone.type=VisionTransformr'],
     "unknown type 'VisionTransformr' (at model.backbone.type): no registry of densevit, mmengine "
     "or mmcv has it. Did you mean 'VisionTransformer'?"),
    (['train_cfg.max_iters=abc'],
     "--cfg-options train_cfg.max_iters='abc': expects an integer (the config has 4), got 'abc'"),
    (['train_cfg.max_iter=2'],
     "--cfg-options train_cfg.max_iter=2: train_cfg has no key 'max_iter': did you mean "
     "'max_iters'?"),
    (['load_from=http://127.0.0.1:9/missing.pth'],
     'could not download the checkpoint http://127.0.0.1:9/missing.pth'),
])
def test_bad_options_are_one_line_naming_key_and_value(train_tool, tmp_path, capsys,
                                                       monkeypatch, options, expected):
    """Each printed a 6-28 frame traceback from inside the runner."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    config = write_config(tmp_path)
    rc = train_tool.main([config, '--work-dir', str(tmp_path / 'w'), '--cfg-options', *options])
    (line,) = stderr_lines(capsys)
    assert rc == 1 and expected in line, line


def test_a_key_given_twice_is_refused(train_tool, tmp_path, capsys):
    config = write_config(tmp_path)
    with pytest.raises(SystemExit) as e:
        train_tool.main([config, '--cfg-options', 'train_cfg.max_iters=2',
                         'train_cfg.max_iters=3'])
    assert e.value.code == 2
    assert ('--cfg-options gives train_cfg.max_iters twice (train_cfg.max_iters=2 and '
            'train_cfg.max_iters=3); give it once') in capsys.readouterr().err


def test_missing_base_file_and_broken_config_are_one_line(train_tool, tmp_path, capsys):
    config = tmp_path / 'child.py'
    config.write_text("_base_ = ['nothere.py']\n")
    assert train_tool.main([str(config)]) == 1
    (line,) = stderr_lines(capsys)
    assert line == (f'densevit: {config}: config names a file that is not found (in _base_ or '
                    f'read_base): {tmp_path / "nothere.py"}')
    config.write_text('x = (\n')
    assert load_tool('tools/test.py').main([str(config), 'x.pth']) == 1
    (line,) = stderr_lines(capsys)
    assert line.startswith(f'densevit: {config}: not valid Python (line 1)')


def test_a_work_dir_that_cannot_be_written_is_named(train_tool, tmp_path, capsys):
    config = write_config(tmp_path)
    (tmp_path / 'a_file').write_text('')
    assert train_tool.main([config, '--work-dir', str(tmp_path / 'a_file' / 'w')]) == 1
    (line,) = stderr_lines(capsys)
    assert f'cannot use the work dir {tmp_path}/a_file/w: {tmp_path}/a_file is a file' in line
