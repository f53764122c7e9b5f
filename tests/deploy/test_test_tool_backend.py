"""tools/test.py --backend onnxruntime on the tiny trained segmentor and detector: the same
dataset, pipeline and metric give the same predictions (and so the same mIoU / AP) as
PyTorch; a file that is not ONNX is refused in one line."""
import pickle

import pytest
import torch

from tiny_checkpoints import trained_checkpoint
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
def test_onnxruntime_backend_predicts_as_pytorch(tmp_path_factory, tmp_path, kind):
    ckpt = trained_checkpoint(tmp_path_factory, kind)
    onnx_file = tmp_path / f'{kind}.onnx'
    assert load_tool('tools/deploy/export_onnx.py').main(
        [ckpt['config'], ckpt['ckpt'], '--out', str(onnx_file), '--dynamic']) == 0
    ref = _test(ckpt['config'], ckpt['ckpt'], tmp_path, 'torch')
    got = _test(ckpt['config'], str(onnx_file), tmp_path, 'ort', '--backend', 'onnxruntime')
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


def test_wrong_onnx_file_is_one_line(tmp_path_factory, tmp_path, capsys):
    ckpt = trained_checkpoint(tmp_path_factory, 'seg')
    bad = tmp_path / 'bad.onnx'
    bad.write_text('not onnx')
    with isolated():
        rc = load_tool('tools/test.py').main(
            [ckpt['config'], str(bad), '--backend', 'onnxruntime', '--work-dir',
             str(tmp_path / 'w'), '--cfg-options', *unique_names()])
    err = capsys.readouterr().err
    assert rc == 1 and 'bad.onnx is not a readable ONNX file' in err, err
