"""Session fixtures of the deploy tests (the models live in ``onnx_cases.py``)."""
import pytest
import torch

from tiny_run import isolated_run_state  # noqa: F401

pytest.importorskip('onnx')
pytest.importorskip('onnxscript')
pytest.importorskip('onnxruntime')


@pytest.fixture(scope='session')
def exported(tmp_path_factory):
    """``exported(name)`` -> (model, path of its dynamic ONNX file), exported once."""
    from onnx_cases import build

    from densevit.deploy.export import export_onnx

    cache, root = {}, tmp_path_factory.mktemp('onnx')

    def get(name):
        if name not in cache:
            model = build(name)
            path = root / f'{name}.onnx'
            with torch.no_grad():
                export_onnx(model, path, dynamic=True)
            cache[name] = model, path
        return cache[name]
    return get
