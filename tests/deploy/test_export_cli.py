"""tools/deploy/export_onnx.py on the tiny trained segmentor: the file it writes gives
PyTorch's outputs within 1e-4 (--verify, and the trained weights through OnnxRuntimeModel)."""
import torch

from densevit.deploy.onnx_model import OnnxRuntimeModel

from tiny_checkpoints import trained_checkpoint
from tiny_run import load_tool


def test_cli_exports_and_verifies(tmp_path_factory, tmp_path, capsys):
    ckpt = trained_checkpoint(tmp_path_factory, 'seg')
    out = tmp_path / 'seg.onnx'
    rc = load_tool('tools/deploy/export_onnx.py').main(
        [ckpt['config'], ckpt['ckpt'], '--out', str(out), '--dynamic', '--verify'])
    assert rc == 0
    text = capsys.readouterr().out
    assert "inputs ['inputs'], outputs ['seg_logits'], opset 18, dynamic" in text
    diff = float(text.split('= ')[-1].split()[0])
    assert diff <= 1e-4, text

    # the trained weights went into the file: same predictions as the PyTorch model
    from densevit.apis import init_model
    model = init_model(ckpt['config'], ckpt['ckpt'])
    onnx_model = OnnxRuntimeModel(model, out)
    x = torch.randn(2, 3, 56, 72)
    with torch.no_grad():
        assert (onnx_model(x, mode='tensor') - model.encode_decode(x)).abs().max() <= 1e-4


def test_cli_bad_opset_is_one_line(tmp_path_factory, tmp_path, capsys):
    ckpt = trained_checkpoint(tmp_path_factory, 'seg')
    rc = load_tool('tools/deploy/export_onnx.py').main(
        [ckpt['config'], ckpt['ckpt'], '--out', str(tmp_path / 'x.onnx'), '--opset', '12'])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith('densevit: densevit.deploy: opset 12 is too old'), err
