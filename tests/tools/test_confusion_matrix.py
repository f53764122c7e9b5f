"""tools/analysis/confusion_matrix.py: the pixel counts against a loop over the pixels and a
case worked by hand, its table / PNG / JSON from the pickle tools/test.py --out writes, and
one clear error for what it cannot use."""
import json

import mmengine
import numpy as np
import pytest
import torch

from densevit.evaluation.iou_metric import area_stats, confusion_counts

from tiny_run import load_tool


@pytest.fixture(scope='module')
def tool():
    return load_tool('tools/analysis/confusion_matrix.py')


def brute_force(pairs, num_classes, ignore_index):
    counts = np.zeros((num_classes, num_classes), np.int64)
    for pred, label in pairs:
        for p, g in zip(pred.ravel().tolist(), label.ravel().tolist(), strict=True):
            if g != ignore_index:
                counts[g, p] += 1
    return counts


def random_pair(rng, num_classes, shape=(7, 9)):
    pred = rng.integers(0, num_classes, shape)
    label = rng.integers(0, num_classes, shape)
    label[rng.random(shape) < 0.2] = 255
    return pred, label


def test_counts_match_a_loop_over_the_pixels_and_the_areas():
    rng = np.random.default_rng(0)
    for num_classes in (1, 3, 6):
        pred, label = random_pair(rng, num_classes)
        got = confusion_counts(torch.as_tensor(pred), torch.as_tensor(label), num_classes)
        assert got.tolist() == brute_force([(pred, label)], num_classes, 255).tolist()
        inter, _, area_pred, area_label = area_stats(torch.as_tensor(pred),
                                                     torch.as_tensor(label), num_classes)
        assert torch.equal(got.diagonal(), inter)
        assert torch.equal(got.sum(0), area_pred) and torch.equal(got.sum(1), area_label)


def write_config(path, classes=('a', 'b', 'c')):
    path.write_text(f"test_dataloader = dict(dataset=dict(type='ShapesSegDataset', "
                    f"metainfo=dict(classes={classes!r})))\n")
    return str(path)


def sample(pred, label, name):
    return dict(img_path=name, pred_sem_seg=dict(data=torch.as_tensor(pred)[None]),
                gt_sem_seg=dict(data=torch.as_tensor(label)[None]))


def test_tool_table_picture_and_json(tool, tmp_path, capsys):
    # by hand: class a labelled on 4 pixels, 3 predicted a, 1 predicted b; b labelled on 2,
    # both predicted b; c never labelled, predicted once (on an ignored pixel, not counted)
    pred = np.array([[0, 0, 0, 1], [1, 1, 2, 2]])
    label = np.array([[0, 0, 0, 0], [1, 1, 255, 255]])
    rng = np.random.default_rng(1)
    more = [random_pair(rng, 3) for _ in range(3)]
    pkl = tmp_path / 'results.pkl'
    mmengine.dump([sample(pred, label, 'hand.png')]
                  + [sample(p, g, f'{i}.png') for i, (p, g) in enumerate(more)], str(pkl))
    hand = tmp_path / 'hand.pkl'
    mmengine.dump([sample(pred, label, 'hand.png')], str(hand))
    config = write_config(tmp_path / 'cfg.py')

    out = tmp_path / 'hand.json'
    assert tool.main([config, str(hand), '--json', str(out)]) == 0
    result = json.loads(out.read_text())['results']
    assert result['counts'] == [[3, 1, 0], [0, 2, 0], [0, 0, 0]]
    assert result['row_shares'][0] == [0.75, 0.25, 0.0]
    # IoU a = 3 / (4 + 3 - 3), b = 2 / (2 + 3 - 2), c: neither labelled nor predicted
    assert result['iou'][:2] == pytest.approx([75.0, 200 / 3])
    assert result['iou'][2] is None or np.isnan(result['iou'][2])
    assert '75.0' in capsys.readouterr().out

    png, out = tmp_path / 'cm.png', tmp_path / 'all.json'
    assert tool.main([config, str(pkl), '--out', str(png), '--json', str(out)]) == 0
    assert png.stat().st_size > 1000
    counts = json.loads(out.read_text())['results']['counts']
    assert counts == brute_force([(pred, label)] + more, 3, 255).tolist()


def test_tool_refuses_what_it_cannot_use(tool, tmp_path, capsys):
    config = write_config(tmp_path / 'cfg.py')
    no_gt = tmp_path / 'no_gt.pkl'
    mmengine.dump([dict(img_path='x.png', pred_sem_seg=dict(data=torch.zeros(1, 2, 2)))],
                  str(no_gt))
    assert tool.main([config, str(no_gt)]) == 2
    err = capsys.readouterr().err
    assert 'no_gt.pkl' in err and 'x.png' in err and 'gt_sem_seg' in err

    too_many = tmp_path / 'classes.pkl'
    mmengine.dump([sample(np.zeros((2, 2), int), np.full((2, 2), 5), 'y.png')], str(too_many))
    assert tool.main([config, str(too_many)]) == 2
    err = capsys.readouterr().err
    assert 'y.png' in err and '3 classes' in err and '[5]' in err

    assert tool.main([config, str(tmp_path / 'missing.pkl')]) == 2
    assert 'missing.pkl' in capsys.readouterr().err
