"""Session fixtures of the deploy tests (the models live in ``onnx_cases.py``).

Every ONNX file is exported once per session (the export, tracing with symbolic sizes,
is what these tests spend their time on): ``cli_exported(kind)`` runs
``tools/deploy/export_onnx.py --dynamic --verify`` on the tiny trained checkpoint of
``kind``, and its file also serves the rows of ``onnx_cases.TRAINED`` and
``tools/test.py --backend onnxruntime``; ``exported(name)`` exports every other row.
"""
import contextlib
import io

import pytest
import torch

from tiny_checkpoints import trained_checkpoint
from tiny_run import isolated_run_state, load_tool  # noqa: F401

pytest.importorskip('onnx')
pytest.importorskip('onnxscript')
pytest.importorskip('onnxruntime')


@pytest.fixture(scope='session')
def cli_exported(tmp_path_factory):
    """``cli_exported(kind)`` ('seg' / 'det') -> dict(config, ckpt, onnx, rc, stdout, stderr)
    of ``export_onnx.py CONFIG CKPT --out F.onnx --dynamic --verify``, run once."""
    cache, root = {}, tmp_path_factory.mktemp('onnx_cli')

    def get(kind):
        if kind not in cache:
            run = dict(trained_checkpoint(tmp_path_factory, kind), onnx=root / f'{kind}.onnx')
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                run['rc'] = load_tool('tools/deploy/export_onnx.py').main(
                    [run['config'], run['ckpt'], '--out', str(run['onnx']), '--dynamic',
                     '--verify'])
            cache[kind] = dict(run, stdout=out.getvalue(), stderr=err.getvalue())
        return cache[kind]
    return get


@pytest.fixture(scope='session')
def exported(tmp_path_factory, cli_exported):
    """``exported(name)`` -> (model, path of its dynamic ONNX file), exported once."""
    from onnx_cases import TRAINED, build

    from densevit.apis import init_model
    from densevit.deploy.export import export_onnx

    cache, root = {}, tmp_path_factory.mktemp('onnx')

    def get(name):
        if name not in cache:
            if name in TRAINED:
                run = cli_exported(TRAINED[name])
                assert run['rc'] == 0, run['stderr']
                cache[name] = init_model(run['config'], run['ckpt']), run['onnx']
            else:
                model = build(name)
                path = root / f'{name}.onnx'
                with torch.no_grad():
                    export_onnx(model, path, dynamic=True)
                cache[name] = model, path
        return cache[name]
    return get
