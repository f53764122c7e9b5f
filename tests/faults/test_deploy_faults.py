"""ONNX deployment faults: a graph exported at a fixed batch is checked against the test data
loader's batches before testing (the last, smaller batch used to fail in ONNX Runtime with a
shape error); ``tools/deploy/export_onnx.py`` with a bad config or checkpoint is one line."""
import pytest
import torch

from tiny_run import TINY_CONFIG, isolated, load_tool, unique_names, write_seg_config

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxscript')
ort = pytest.importorskip('onnxruntime')

from densevit.deploy.runtime import OnnxGraph, OnnxGraphError, check_fixed_batch  # noqa: E402


def seg_graph(path, batch, size=8, classes=4, ir_version=8):
    """A segmentor graph as densevit's (input ``inputs``, output ``seg_logits``, opset 18): a
    1x1 convolution to ``classes`` logits; ``batch`` an int (fixed) or a name (dynamic)."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        torch.randn(classes, 3, 1, 1, generator=torch.Generator().manual_seed(0)).numpy(), 'w')
    graph = helper.make_graph(
        [helper.make_node('Conv', ['inputs', 'w'], ['seg_logits'])], 'seg',
        [helper.make_tensor_value_info('inputs', TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info('seg_logits', TensorProto.FLOAT,
                                       [batch, classes, size, size])], [weight])
    # IR version 8, opset 18's (onnx.helper.VERSION_TABLE): make_model would write the installed
    # onnx's newest, which an older onnxruntime refuses to load (onnx 1.23: IR 14, ORT 1.30: 13)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)],
                              ir_version=ir_version)
    onnx.save(model, str(path))
    return path


def test_a_fixed_batch_graph_is_checked_against_every_test_batch(tmp_path):
    graph = OnnxGraph(seg_graph(tmp_path / 'fixed.onnx', 2), 'seg')
    # the original failure: the graph takes batches of 2 only
    assert graph(torch.zeros(2, 3, 8, 8)).shape == (2, 4, 8, 8)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
        graph(torch.zeros(1, 3, 8, 8))
    check_fixed_batch(graph, 2, 6)  # three batches of 2
    with pytest.raises(OnnxGraphError) as info:
        check_fixed_batch(graph, 2, 5)  # ... and a last batch of 1
    assert str(info.value) == (
        f'densevit.deploy: {tmp_path}/fixed.onnx was exported with the fixed input shape '
        '[2, 3, 8, 8] (batch 2), but the last batch of the test data holds 1 image(s) (5 images '
        'in batches of 2): re-export it with tools/deploy/export_onnx.py CONFIG CHECKPOINT '
        f'--out {tmp_path}/fixed.onnx --dynamic (test_dataloader.batch_size=2 would leave a '
        'last batch of 1)')
    with pytest.raises(OnnxGraphError, match=r'but a batch of the test data holds 4 image\(s\) '
                                             r'\(8 images in batches of 4\).* or set '
                                             r'test_dataloader.batch_size=2$'):
        check_fixed_batch(graph, 4, 8)
    with pytest.raises(OnnxGraphError, match=r'a batch of the test data holds 1 image\(s\)'):
        check_fixed_batch(graph, 2, 1)  # a single image
    check_fixed_batch(graph, 2, 5, drop_last=True)  # the last image is dropped: no batch of 1
    dynamic = OnnxGraph(seg_graph(tmp_path / 'dynamic.onnx', 'batch'), 'seg')
    check_fixed_batch(dynamic, 2, 5)
    assert dynamic(torch.zeros(1, 3, 8, 8)).shape == (1, 4, 8, 8)


def test_a_graph_newer_than_onnxruntime_is_one_error(tmp_path):
    path = seg_graph(tmp_path / 'new.onnx', 2, ir_version=99)
    with pytest.raises(OnnxGraphError) as info:
        OnnxGraph(path, 'seg')
    assert str(info.value).startswith(f'densevit.deploy: {path} has ONNX IR version 99, newer '
                                      f'than this onnxruntime {ort.__version__} reads (at most ')


def test_test_tool_refuses_a_fixed_batch_graph_before_testing(tmp_path, capsys):
    """tools/test.py --backend onnxruntime on the tiny segmentation config (5 validation images
    in batches of 2) with a graph fixed to batch 2: one line before any batch runs."""
    config = write_seg_config(tmp_path)
    fixed = seg_graph(tmp_path / 'fixed.onnx', 2, size=48)
    with isolated():
        rc = load_tool('tools/test.py').main(
            [config, str(fixed), '--backend', 'onnxruntime', '--work-dir', str(tmp_path / 'w'),
             '--cfg-options', *unique_names()])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith('densevit: ')]
    assert rc == 1 and len(lines) == 1 and 'Traceback' not in err, err
    assert ('fixed.onnx was exported with the fixed input shape [2, 3, 48, 48] (batch 2), but '
            'the last batch of the test data holds 1 image(s)') in lines[0]
    assert '--dynamic' in lines[0]


def _truncated(tmp_path):
    path = tmp_path / 'truncated.pth'
    torch.save({'state_dict': {'w': torch.zeros(1000)}}, path)
    path.write_bytes(path.read_bytes()[:300])
    return path


def _other_model(tmp_path):
    path = tmp_path / 'other.pth'
    torch.save({'state_dict': {'encoder.weight': torch.zeros(3, 3)}}, path)
    return path


def _unknown_type(tmp_path):
    path = tmp_path / 'typo.py'
    path.write_text(f"_base_ = [{str(TINY_CONFIG)!r}]\n"
                    "model = dict(backbone=dict(type='VisionTransformr'))\n")
    return path


BAD_INPUTS = {  # case -> (config, checkpoint, what the one line says)
    'missing_config': (lambda t: t / 'nope.py', lambda t: t / 'x.pth',
                       'No such file or directory'),
    'unknown_type': (_unknown_type, lambda t: t / 'x.pth',
                     'VisionTransformr is not in the densevit::model registry'),
    'missing_checkpoint': (lambda t: TINY_CONFIG, lambda t: t / 'nope.pth',
                           'checkpoint not found: '),
    'truncated_checkpoint': (lambda t: TINY_CONFIG, _truncated, 'is truncated or corrupt'),
    'other_model': (lambda t: TINY_CONFIG, _other_model, 'other.pth does not fit this model'),
}


@pytest.mark.parametrize('case', list(BAD_INPUTS))
def test_export_tool_with_a_bad_config_or_checkpoint_is_one_line(tmp_path, capsys, case):
    config, ckpt, expected = BAD_INPUTS[case]
    rc = load_tool('tools/deploy/export_onnx.py').main(
        [str(config(tmp_path)), str(ckpt(tmp_path)), '--out', str(tmp_path / 'x.onnx')])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith('densevit: ') and err.count('\n') == 1, err
    assert expected in err and 'Traceback' not in err, err
    assert not (tmp_path / 'x.onnx').exists()
