"""tools/test.py --tta on the tiny trained detector and segmentor."""
import pickle

import pytest

from tiny_checkpoints import trained_checkpoint
from tiny_run import isolated, load_tool, unique_names


def run_test_py(args, tmp_path):
    with isolated():
        return load_tool('tools/test.py').main([*args, '--cfg-options', *unique_names()])


@pytest.mark.parametrize('kind', ['det', 'seg'])
def test_test_py_tta_runs_on_the_tiny_checkpoints(kind, tmp_path, tmp_path_factory):
    run = trained_checkpoint(tmp_path_factory, kind)
    out = tmp_path / 'tta.pkl'
    rc = run_test_py([run['config'], run['ckpt'], '--tta', '--tta-ratios', '0.75', '1.0', '1.25',
                    '--work-dir', str(tmp_path / 'w'), '--out', str(out)], tmp_path)
    assert rc == 0
    with open(out, 'rb') as f:
        preds = pickle.load(f)
    assert len(preds) == 5  # the tiny validation split
    assert all(p['tta_views'] == 6 for p in preds)  # 3 scales x (no flip, flip)
    if kind == 'seg':
        assert preds[0]['pred_sem_seg']['data'].shape[-2:] == (48, 48)  # original size
    else:  # 5 queries x 6 views, less what class-wise NMS removed; best first
        for p in preds:
            scores = p['pred_instances']['scores']
            assert 0 < len(scores) <= 30 and len(p['pred_instances']['bboxes']) == len(scores)
            assert scores.tolist() == sorted(scores.tolist(), reverse=True)


def test_test_py_tta_errors(tmp_path, tmp_path_factory, capsys):
    run = trained_checkpoint(tmp_path_factory, 'det')
    assert run_test_py([run['config'], run['ckpt'], '--tta-no-flip'], tmp_path) == 1
    assert '--tta-ratios / --tta-no-flip need --tta' in capsys.readouterr().err
    assert run_test_py([run['config'], run['ckpt'], '--tta', '--show-dir', 's'], tmp_path) == 1
    assert 'leave out --tta' in capsys.readouterr().err
