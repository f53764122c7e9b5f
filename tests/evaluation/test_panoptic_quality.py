"""Panoptic quality on cases worked out by hand: void, crowd, unmatched predictions,
IoU exactly 0.5, a class absent from both ground truth and prediction, things and stuff.

Each map is a strip of pixels written as a string, one character a pixel: ``.`` is
void, any other character a segment; the dicts give each segment's class (and crowd
flag for ground truth).
"""
import math

import numpy as np
import pytest

from densevit.evaluation.panoptic_quality import (
    FN,
    FP,
    IOU,
    TP,
    class_table,
    pq_metrics,
    pq_results,
    pq_stats,
    summary_table,
)

PERSON, CAR, SKY, ROAD, GRASS = range(5)
ISTHING = [True, True, False, False, False]


def strip(text):
    """'aab.' -> [1, 4] ids: ord(character), 0 for '.'."""
    return np.array([[0 if ch == '.' else ord(ch) for ch in text]])


def stats(gt, gt_segments, pred, pred_segments):
    return pq_stats(strip(gt), {ord(k): v for k, v in gt_segments.items()},
                    strip(pred), {ord(k): v for k, v in pred_segments.items()}, num_classes=5)


# image 1, region by region (the ground truth above, the prediction below):
#   'aaaaaa....'  person a (6 px) then void;  '..11111111'  person 1 (8 px): 4 px on a,
#                 4 on void, so IoU = 4 / (6 + 8 - 4 - 4) = 2/3 > 0.5: a match (it would be
#                 4 / 10 without removing void from the union)
#   'bbbb'        person b;  '22..'  person 2: IoU = 2 / 4 = 0.5 exactly: no match,
#                 b is a false negative, 2 a false positive (none of it on void or crowd)
#   'cccssssssss' car crowd c (3 px), sky s (8 px);  '33333444444': car 3 (5 px, 3 on
#                 the car crowd: more than half, not a false positive), sky 4 (6 px on s:
#                 IoU 6 / 8 = 0.75, a match)
#   'dddd'        person d;  '5555' grass 5: d a false negative, 5 a false positive
#   '...p'        person p;  '6666' car 6: 3 of its 4 px on void, not a false positive;
#                 p a false negative
#   '..qq'        sky q;  '7777' car 7: exactly half on void, a false positive; q missed
GT1 = 'aaaaaa....' 'bbbb' 'cccssssssss' 'dddd' '...p' '..qq'
PRED1 = '..11111111' '22..' '33333444444' '5555' '6666' '7777'
GT1_SEG = dict(a=(PERSON, 0), b=(PERSON, 0), c=(CAR, 1), s=(SKY, 0), d=(PERSON, 0),
               p=(PERSON, 0), q=(SKY, 0))
PRED1_SEG = {'1': PERSON, '2': PERSON, '3': CAR, '4': SKY, '5': GRASS, '6': CAR, '7': CAR}

# image 2:
#   'CCCC'   car crowd C;  '8888' person 8: all on a crowd of another class: a false positive
#   '..CXX'  void, car crowd, sky X;  '99999' car 9: 2 px void + 1 px crowd of its class =
#            3 of 5, more than half: not a false positive; X a false negative
GT2 = 'CCCC' '..CXX'
PRED2 = '8888' '99999'
GT2_SEG = dict(C=(CAR, 1), X=(SKY, 0))
PRED2_SEG = {'8': PERSON, '9': CAR}


def test_image_one_by_hand():
    got = stats(GT1, GT1_SEG, PRED1, PRED1_SEG)
    want = np.zeros((5, 4))
    want[PERSON] = [2 / 3, 1, 1, 3]   # a matched; 2 false positive; b, d, p missed
    want[CAR] = [0, 0, 1, 0]          # 3 (crowd) and 6 (void) forgiven, 7 not; crowd c no FN
    want[SKY] = [0.75, 1, 0, 1]       # s matched, q missed
    want[GRASS] = [0, 0, 1, 0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_image_two_by_hand():
    got = stats(GT2, GT2_SEG, PRED2, PRED2_SEG)
    want = np.zeros((5, 4))
    want[PERSON, FP] = 1
    want[SKY, FN] = 1
    np.testing.assert_array_equal(got, want)


def test_dataset_means_by_hand():
    total = stats(GT1, GT1_SEG, PRED1, PRED1_SEG) + stats(GT2, GT2_SEG, PRED2, PRED2_SEG)
    res = pq_results(total, ISTHING)
    person_pq = 100 * (2 / 3) / (1 + 2 / 2 + 3 / 2)   # sum IoU / (TP + FP/2 + FN/2)
    person_rq = 100 * 1 / (1 + 2 / 2 + 3 / 2)
    sky_pq, sky_rq = 100 * 0.75 / (1 + 2 / 2), 100 * 1 / (1 + 2 / 2)
    per = res['per_class']
    np.testing.assert_allclose(per['PQ'][[PERSON, CAR, SKY, GRASS]], [person_pq, 0, sky_pq, 0])
    np.testing.assert_allclose(per['SQ'][[PERSON, CAR, SKY, GRASS]], [100 * 2 / 3, 0, 75, 0])
    np.testing.assert_allclose(per['RQ'][[PERSON, CAR, SKY, GRASS]], [person_rq, 0, sky_rq, 0])
    assert math.isnan(per['PQ'][ROAD]) and not per['n'][ROAD]  # absent from both: left out
    assert (res['All']['n'], res['Things']['n'], res['Stuff']['n']) == (4, 2, 2)
    assert res['All']['PQ'] == pytest.approx((person_pq + sky_pq) / 4)
    assert res['All']['SQ'] == pytest.approx((100 * 2 / 3 + 75) / 4)
    assert res['All']['RQ'] == pytest.approx((person_rq + sky_rq) / 4)
    assert res['Things']['PQ'] == pytest.approx(person_pq / 2)
    assert res['Stuff']['PQ'] == pytest.approx(sky_pq / 2)      # sky and grass; road left out
    assert res['Stuff']['RQ'] == pytest.approx(sky_rq / 2)
    metrics = pq_metrics(res)
    assert list(metrics) == ['PQ', 'SQ', 'RQ', 'PQ_th', 'SQ_th', 'RQ_th', 'PQ_st', 'SQ_st',
                             'RQ_st']
    assert metrics['PQ_th'] == res['Things']['PQ']
    table = class_table(res, ['person', 'car', 'sky', 'road', 'grass'], ISTHING)
    assert 'road' in table and '-' in table.splitlines()[4]
    assert summary_table({f'coco_panoptic/{k}': v for k, v in metrics.items()}).count('\n') == 3
    assert summary_table({'coco/bbox_mAP': 0.5}) is None


@pytest.mark.parametrize('gt, pred, match', [
    ('aaaa', '11..', False),      # 2 / 4 = 0.5: no match
    ('aaaa', '111.', True),       # 3 / 4
    ('aaaa..', '..1111', False),  # 2 / (4 + 4 - 2 - 2) = 0.5 with void removed: no match
    ('aaaa..', '.1111.', True),   # 3 / (4 + 4 - 3 - 1) = 0.75
    ('aa..', '1111', True),       # 2 / (2 + 4 - 2 - 2) = 1: void never lowers the IoU
])
def test_iou_threshold_is_strict(gt, pred, match):
    got = stats(gt, dict(a=(SKY, 0)), pred, {'1': SKY})
    assert got[SKY, TP] == match
    assert got[SKY, FN] == (not match)
    # unmatched: at most half of the prediction on void, so a false positive
    assert got[SKY, FP] == (not match)


def test_class_must_agree_and_crowd_is_never_matched():
    got = stats('aaaa', dict(a=(PERSON, 0)), '1111', {'1': CAR})
    assert got[PERSON].tolist() == [0, 0, 0, 1] and got[CAR].tolist() == [0, 0, 1, 0]
    got = stats('cccc', dict(c=(CAR, 1)), '1111', {'1': CAR})
    assert got.sum() == 0  # a prediction on its crowd: neither TP nor FP; crowd: no FN


def test_perfect_prediction_and_empty_image():
    gt = 'aabbbsss'
    got = stats(gt, dict(a=(PERSON, 0), b=(PERSON, 0), s=(SKY, 0)),
                gt.replace('a', '1').replace('b', '2').replace('s', '3'),
                {'1': PERSON, '2': PERSON, '3': SKY})
    res = pq_results(got, ISTHING)
    assert (res['All']['PQ'], res['Things']['PQ'], res['Stuff']['PQ']) == (100, 100, 100)
    empty = stats('....', {}, '....', {})
    assert empty.sum() == 0
    res = pq_results(empty, ISTHING)
    assert res['All']['n'] == 0 and math.isnan(res['All']['PQ'])


def test_predicted_segment_without_pixels_counts_nowhere():
    got = stats('aaaa', dict(a=(SKY, 0)), '1111', {'1': SKY, '2': CAR})
    assert got[SKY, TP] == 1 and got[CAR].sum() == 0


def test_refusals():
    with pytest.raises(ValueError, match=r'ground-truth ids \[98\]'):
        stats('ab', dict(a=(SKY, 0)), '11', {'1': SKY})
    with pytest.raises(ValueError, match=r'predicted ids \[50\]'):
        stats('aa', dict(a=(SKY, 0)), '12', {'1': SKY})
    with pytest.raises(ValueError, match=r'predicted segment labels \[7\]'):
        stats('aa', dict(a=(SKY, 0)), '11', {'1': 7})
    with pytest.raises(ValueError, match='differ in size'):
        pq_stats(np.zeros((2, 3)), {}, np.zeros((3, 2)), {}, 5)
    with pytest.raises(ValueError, match='positive'):
        pq_stats(np.zeros((1, 1)), {0: (SKY, 0)}, np.zeros((1, 1)), {}, 5)
    with pytest.raises(ValueError, match='isthing'):
        pq_results(np.zeros((5, 4)), [True])
    assert IOU == 0  # column order documented in pq_stats

