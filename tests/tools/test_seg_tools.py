"""tools/train.py and tools/test.py with a segmentor: metrics, --out and --show-dir PNGs."""
import json
import pickle

import cv2

from densevit.visualization.enlarge import enlarge_factor

from tiny_run import isolated, load_tool, scalar_records, unique_names, write_seg_config


def test_train_then_test_with_show_dir(tmp_path):
    config = write_seg_config(tmp_path, extra='train_cfg = dict(max_iters=2, val_interval=2)\n'
                                              'param_scheduler = []\n')
    work_dir = tmp_path / 'work'
    with isolated():
        rc = load_tool('tools/train.py').main(
            [config, '--work-dir', str(work_dir), '--cfg-options', *unique_names()])
    assert rc == 0 and (work_dir / 'iter_2.pth').is_file()
    val = [r for r in scalar_records(work_dir) if 'mIoU' in r]
    assert len(val) == 1 and {'aAcc', 'mAcc'} <= set(val[0])
    assert val[0]['aAcc'] > 0  # not a comparison of zeros below

    out = tmp_path / 'preds.pkl'
    with isolated():
        rc = load_tool('tools/test.py').main(
            [config, str(work_dir / 'iter_2.pth'), '--work-dir', str(tmp_path / 'test'),
             '--out', str(out), '--show-dir', 'show', '--cfg-options', *unique_names()])
    assert rc == 0
    with open(out, 'rb') as f:
        preds = pickle.load(f)
    num_val = len(list((tmp_path / 'shapes_seg' / 'images' / 'validation').glob('*.png')))
    assert len(preds) == num_val > 0
    # the same weights and split (test = val): tools/test.py scores what validation logged
    (log,) = (tmp_path / 'test').glob('*/*.json')
    test_metrics = json.loads(log.read_text())
    assert {k: test_metrics[k] for k in ('aAcc', 'mIoU', 'mAcc')} == {
        k: val[0][k] for k in ('aAcc', 'mIoU', 'mAcc')}
    h, w = cv2.imread(preds[0]['img_path']).shape[:2]
    assert all(p['pred_sem_seg']['data'].shape == (1, h, w) for p in preds)
    pngs = sorted((tmp_path / 'test').glob('*/show/*.png'))
    assert len(pngs) == num_val
    s = enlarge_factor((h, w))  # gt | pred, small images enlarged, each pixel s x s
    assert cv2.imread(str(pngs[0])).shape == (h * s, 2 * w * s, 3)
