"""tools/test.py --backend onnxruntime on the tiny trained segmentor and detector: the same
dataset, pipeline and metric give the same predictions (and so the same mIoU / AP) as
PyTorch; a file that is not the config's graph (not ONNX, other input names, the other
task's graph, an old opset) is refused in one line."""
import pickle

import pytest
import torch
from onnx_cases import old_opset, renamed_input

from tiny_run import isolated, load_tool, unique_names


def _test(config, ckpt, tmp_path, tag, *extra):
    out = tmp_path / f'{tag}.pkl'
    with isolated():
        rc = load_tool('tools/test.py').main(
            [config, ckpt, '--work-dir', str(tmp_path / tag), '--out', str(out), *extra,
             '--cfg-options', *unique_names()])
    assert rc == 0
    with open(out, 'rb') as f:
        return pickle.load(f)


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_onnxruntime_backend_predicts_as_pytorch(cli_exported, tmp_path, kind):
    run = cli_exported(kind)  # export_onnx.py CONFIG CKPT --out F.onnx --dynamic
    assert run['rc'] == 0, run['stderr']
    ref = _test(run['config'], run['ckpt'], tmp_path, 'torch')
    got = _test(run['config'], str(run['onnx']), tmp_path, 'ort', '--backend', 'onnxruntime')
    assert len(got) == len(ref) > 0
    for r, g in zip(ref, got, strict=True):
        assert r['img_path'] == g['img_path']
        if kind == 'seg':
            assert torch.equal(r['pred_sem_seg']['data'], g['pred_sem_seg']['data'])
            assert (r['seg_logits']['data'] - g['seg_logits']['data']).abs().max() <= 1e-4
        else:
            rp, gp = r['pred_instances'], g['pred_instances']
            assert torch.equal(rp['labels'], gp['labels'])
            assert (rp['scores'] - gp['scores']).abs().max() <= 1e-4
            assert (rp['bboxes'] - gp['bboxes']).abs().max() <= 1e-4 * max(r['ori_shape'])


def _junk(dst):
    dst.write_text('not onnx')
    return dst


BAD_FILES = {  # case -> (make(seg file, det file, dst) -> path, the error line)
    'not_onnx': (lambda seg, det, dst: _junk(dst), 'bad.onnx is not a readable ONNX file'),
    'input_names': (lambda seg, det, dst: renamed_input(seg, dst),
                    "bad.onnx has inputs ['image'] and outputs ['seg_logits'], but a densevit "
                    "segmentor graph has inputs ['inputs']"),
    'other_task': (lambda seg, det, dst: det,
                   "det.onnx has inputs ['inputs', 'pixel_mask'] and outputs ['pred_logits', "
                   "'pred_boxes'], but a densevit segmentor graph has inputs ['inputs']"),
    'old_opset': (lambda seg, det, dst: old_opset(seg, dst, 11),
                  'bad.onnx uses ONNX opset 11; densevit graphs need opset >= 16'),
}


@pytest.mark.parametrize('case', list(BAD_FILES))
def test_wrong_onnx_file_is_one_line(cli_exported, tmp_path, capsys, case):
    seg, det = cli_exported('seg'), cli_exported('det')
    make, expected = BAD_FILES[case]
    bad = make(seg['onnx'], det['onnx'], tmp_path / 'bad.onnx')
    with isolated():
        rc = load_tool('tools/test.py').main(
            [seg['config'], str(bad), '--backend', 'onnxruntime', '--work-dir',
             str(tmp_path / 'w'), '--cfg-options', *unique_names()])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith('densevit: ')]
    assert rc == 1 and len(lines) == 1 and expected in lines[0], err
    assert 'Traceback' not in err, err
