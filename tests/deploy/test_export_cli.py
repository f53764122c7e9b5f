"""tools/deploy/export_onnx.py on the tiny trained segmentor and detector: the file it writes
gives PyTorch's outputs within 1e-4 (--verify, and the trained weights through
OnnxRuntimeModel). The files are the session's (``conftest.cli_exported``)."""
import pytest
import torch

from densevit.deploy.graphs import graph_for
from densevit.deploy.onnx_model import OnnxRuntimeModel

from tiny_checkpoints import trained_checkpoint
from tiny_run import load_tool

IO_LINE = dict(seg="inputs ['inputs'], outputs ['seg_logits'], opset 18, dynamic",
               det="inputs ['inputs', 'pixel_mask'], outputs ['pred_logits', 'pred_boxes'], "
                   'opset 18, dynamic')


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_cli_exports_and_verifies(cli_exported, kind):
    run = cli_exported(kind)
    assert run['rc'] == 0, run['stderr']
    text = run['stdout']
    assert IO_LINE[kind] in text, text
    diff = float(text.split('= ')[-1].split()[0])
    assert diff <= 1e-4, text

    # the trained weights went into the file: same outputs as the PyTorch model
    from densevit.apis import init_model
    model = init_model(run['config'], run['ckpt'])
    onnx_model = OnnxRuntimeModel(model, run['onnx'])
    x = torch.randn(2, 3, 56, 72)
    args = (x,) if kind == 'seg' else (x, torch.zeros(2, 56, 72, dtype=torch.bool))
    with torch.no_grad():
        ref = graph_for(model)(*args)
    got = onnx_model(x, mode='tensor')
    ref, got = (ref, got) if kind == 'det' else ((ref,), (got,))
    for r, g in zip(ref, got, strict=True):
        assert (g - r).abs().max() <= 1e-4


def test_cli_bad_opset_is_one_line(tmp_path_factory, tmp_path, capsys):
    ckpt = trained_checkpoint(tmp_path_factory, 'seg')
    rc = load_tool('tools/deploy/export_onnx.py').main(
        [ckpt['config'], ckpt['ckpt'], '--out', str(tmp_path / 'x.onnx'), '--opset', '12'])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith('densevit: densevit.deploy: opset 12 is too old'), err
