"""A checkpoint given as a URL is read as safely as a local file.

mmengine reads ``http(s)://`` checkpoints with ``torch.hub.load_state_dict_from_url``,
whose default is ``weights_only=False``: a file with a pickled callable runs it. Here the
file is put where torch's hub cache expects the URL's download (no network needed), and
every way a user can name a URL must refuse it without running the payload: the test
tool, ``load_from`` / mmengine's loader (``https://`` and the ``open-mmlab://`` names
that resolve to URLs), ``init_cfg=dict(type='Pretrained')``, ``init_model``.
"""
import os

import pytest
import torch

import densevit  # noqa: F401  (allow-list for checkpoints)
import densevit.engine.runner  # noqa: F401  (installs the safe loader into mmengine)
from densevit.checkpoint.read import (
    CheckpointDownloadError,
    UnsafeCheckpointError,
    cached_url_path,
    load_checkpoint_safely,
)

from tiny_checkpoints import save_evil_checkpoint
from tiny_run import isolated, load_tool, unique_names, write_config

URL = 'https://example.invalid/models/evil_detector.pth'


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """torch's hub cache in a temporary folder, and the marker the payload would create."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    return tmp_path / 'pwned'


def plant(url, marker):
    """An evil file where torch's hub cache keeps ``url``'s download."""
    path = cached_url_path(url)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_evil_checkpoint(path, marker)
    return path


def test_cached_url_path_is_torch_hubs(hub):
    assert cached_url_path(URL) == os.path.join(os.environ['TORCH_HOME'], 'hub', 'checkpoints',
                                                'evil_detector.pth')


def test_url_checkpoint_with_pickled_code_is_refused_everywhere(hub, tmp_path, capsys):
    plant(URL, hub)
    with pytest.raises(UnsafeCheckpointError, match=r'^the global posix\.system: refusing'):
        load_checkpoint_safely(URL)
    # mmengine's own loader (load_from, resume, its Pretrained init) and its URL schemes
    from mmengine.runner.checkpoint import CheckpointLoader, get_external_models
    with pytest.raises(UnsafeCheckpointError):
        CheckpointLoader.load_checkpoint(URL)
    name, url = next((k, v) for k, v in get_external_models().items() if v.startswith('http'))
    plant(url, hub)
    with pytest.raises(UnsafeCheckpointError):  # a name resolved to a URL by mmengine
        CheckpointLoader.load_checkpoint(f'open-mmlab://{name}')
    # densevit's init_cfg Pretrained and init_model
    from densevit.apis import init_model
    from densevit.checkpoint.read import read_checkpoint
    with pytest.raises(UnsafeCheckpointError):
        read_checkpoint(URL)
    config = write_config(tmp_path)
    with pytest.raises(UnsafeCheckpointError):
        init_model(config, URL)
    # the test tool, as the user ran it: one line, exit 1
    with isolated():
        rc = load_tool('tools/test.py').main([config, URL, '--work-dir', str(tmp_path / 'w'),
                                              '--cfg-options', *unique_names()])
    err = capsys.readouterr().err
    assert rc == 1 and 'arbitrary code' in err and 'Traceback' not in err
    assert 'weights_only=False' not in err
    assert not hub.exists()  # the payload never ran


def test_cached_url_checkpoint_loads_offline(hub):
    path = cached_url_path(URL)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({'state_dict': {'w': torch.arange(3.0)}}, path)
    loaded = load_checkpoint_safely(URL)  # example.invalid never resolves: read from the cache
    assert torch.equal(loaded['state_dict']['w'], torch.arange(3.0))


def test_unreachable_url_is_one_clear_error(hub):
    url = 'http://127.0.0.1:9/nothing_here.pth'  # discard port: connection refused
    with pytest.raises(CheckpointDownloadError, match=r'could not download the checkpoint '
                       r'http://127\.0\.0\.1:9/nothing_here\.pth .*give the local path'):
        load_checkpoint_safely(url)
    assert not os.path.exists(cached_url_path(url))  # no partial file left in the cache
