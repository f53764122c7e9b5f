"""OnnxRuntimeModel (``tools/test.py --backend onnxruntime``) on images of different sizes:
a batch of 8 predicts as batch 1 does, as the PyTorch models do
(tests/faults/test_mixed_size_batches.py): its ``test_step`` groups same-size images
(``densevit/models/size_groups.py``); the reference is mmengine's ``test_step`` on one
image at a time."""
import pytest

from densevit.apis import init_model
from densevit.deploy.onnx_model import OnnxRuntimeModel

from mixed_sizes import assert_same, batch1_and_batch8, mixed


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_onnxruntime_batch8_equals_batch1(cli_exported, tmp_path_factory, kind):
    run = cli_exported(kind)  # the tiny trained checkpoint, exported --dynamic
    assert run['rc'] == 0, run['stderr']
    config = mixed(tmp_path_factory, kind, run['config'])
    model = OnnxRuntimeModel(init_model(config, run['ckpt']), run['onnx'], threads=1)
    ref, got, _, _ = batch1_and_batch8(model, config)
    assert_same(ref, got)
