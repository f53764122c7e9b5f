"""tools/test.py --bf16 (and mmengine's own ``test_cfg.fp16=True``) through CocoMetric and
IoUMetric: float32 predictions reach the metric; the detector's predictions equal fp32's
within bf16's precision, image by image, and score as fp32's on a ground truth the tiny
detector scores well on; the segmentor's mIoU equals fp32's within 0.1 point."""
import json
import pickle
from pathlib import Path

import pytest
import torch

from tiny_checkpoints import easy_ground_truth, trained_checkpoint
from tiny_run import isolated, load_tool, unique_names


@pytest.fixture(scope='module')
def test_tool():
    return load_tool('tools/test.py')


def run_test(test_tool, run, work_dir, *extra, options=()):
    """Metrics of one tools/test.py run (from its log folder's ``<timestamp>.json``);
    ``options`` are added to its ``--cfg-options``."""
    with isolated():
        rc = test_tool.main([run['config'], run['ckpt'], '--work-dir', str(work_dir), *extra,
                             '--cfg-options', *options, *unique_names()])
    assert rc == 0
    logs = [p for p in Path(work_dir).glob('*/*.json')]
    assert len(logs) == 1, logs
    return json.loads(logs[0].read_text())


def load_preds(path):
    with open(path, 'rb') as f:  # DumpResults: a plain pickle tools/test.py wrote
        return pickle.load(f)


@pytest.fixture(scope='module')
def det_reference(tmp_path_factory, test_tool):
    """The tiny detector's fp32 predictions and metrics against an easy ground truth.

    After 4 iterations it scores AP 0 on the real validation boxes, and a comparison of
    zeros passes whatever bf16 does; so, as tests/engine/test_distributed.py does, the
    boxes of the validation images (all 5) are replaced by the model's own top fp32
    detection of each (``easy_ground_truth``), on which fp32 scores well above 0."""
    det = trained_checkpoint(tmp_path_factory, 'det')
    root = tmp_path_factory.mktemp('bf16_det_reference')
    run_test(test_tool, det, root / 'plain',
             options=[f'test_evaluator.outfile_prefix={root}/plain'])
    easy = root / 'easy_val.json'
    easy_ground_truth(Path(det['data_root']) / 'annotations' / 'instances_val.json',
                      root / 'plain.bbox.json', easy, num_replaced=5)
    options = [f'test_evaluator.ann_file={easy}']
    metrics = run_test(test_tool, det, root / 'fp32', '--out', str(root / 'fp32.pkl'),
                       options=options)
    return dict(det=det, options=options, metrics=metrics, preds=load_preds(root / 'fp32.pkl'))


@pytest.mark.parametrize('switch', [['--bf16'], ['test_cfg.fp16=True']])
def test_detection_metric_in_bf16(det_reference, test_tool, tmp_path, switch):
    """By our switch and by mmengine's (bf16 autocast on a CPU), image by image: float32
    boxes, the same images, and for each of the 5 queries (``num_dets=None``: every query, in
    query order) the same label, a score within 0.01 and box corners within 0.04 pixel of
    fp32's (measured on these 48-pixel images: 0.0013 and 0.010 pixel; with the box and class
    predictors left in bf16, which densevit/utils/precision.py keeps in float32, the boxes
    move 0.075-0.12 pixel, so this catches that). CocoMetric scores them as fp32's to 0.001,
    on a ground truth where fp32's AP is at least 0.5."""
    det, ref = det_reference['det'], det_reference['metrics']
    options, extra = det_reference['options'], []
    if switch[0].startswith('--'):
        extra = switch
    else:  # mmengine's switch: given through --cfg-options, with the run's own names
        options = [*options, *switch]
    low = run_test(test_tool, det, tmp_path / 'bf16', *extra, '--out',
                   str(tmp_path / 'preds.pkl'), options=options)
    preds = load_preds(tmp_path / 'preds.pkl')

    refs = det_reference['preds']
    assert [p['img_id'] for p in preds] == [r['img_id'] for r in refs] == [1, 2, 3, 4, 5]
    for p, r in zip(preds, refs, strict=True):
        b, f = p['pred_instances'], r['pred_instances']
        assert b['bboxes'].dtype == b['scores'].dtype == torch.float32
        assert b['bboxes'].shape == f['bboxes'].shape == (5, 4)
        assert f['bboxes'].max() > 10  # boxes in pixels of a 48-pixel image
        assert torch.equal(b['labels'], f['labels']), p['img_id']
        assert (b['scores'] - f['scores']).abs().max() < 0.01, p['img_id']
        assert (b['bboxes'] - f['bboxes']).abs().max() < 0.04, p['img_id']

    # the comparison below is not one of zeros (measured 0.746: others' queries outrank
    # some images' own top detection)
    assert 0.5 <= ref['coco/bbox_mAP'] < 1, ref
    keys = [k for k in ref if k.startswith('coco/bbox_mAP')]
    assert 'coco/bbox_mAP_75' in keys
    for k in keys:
        assert abs(low[k] - ref[k]) <= 0.001 + 1e-9, (k, low[k], ref[k])


def test_segmentation_metric_in_bf16(tmp_path_factory, test_tool, tmp_path):
    seg = trained_checkpoint(tmp_path_factory, 'seg')
    ref = run_test(test_tool, seg, tmp_path / 'fp32')
    low = run_test(test_tool, seg, tmp_path / 'bf16', '--bf16')
    assert 'mIoU' in ref
    assert abs(low['mIoU'] - ref['mIoU']) <= 0.1  # mIoU in percent: 0.1 point


def test_benchmark_bf16(tmp_path_factory, tmp_path):
    """benchmark.py --bf16 times the forward under bf16 autocast (a Linear returns bf16)."""
    from densevit.apis import init_model
    det = trained_checkpoint(tmp_path_factory, 'det')
    tool = load_tool('tools/analysis/benchmark.py')
    out = tmp_path / 'bench.json'
    assert tool.main([det['config'], det['ckpt'], '--shape', '48', '48', '--iters', '2',
                      '--warmup', '1', '--bf16', '--json', str(out)]) == 0
    assert json.loads(out.read_text())['results']['precision'] == 'bf16'
    model = init_model(det['config'], det['ckpt'])
    seen = []
    linear = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    tool.benchmark(model, (48, 48), iters=1, warmup=0, precision='bf16')
    tool.benchmark(model, (48, 48), iters=1, warmup=0, precision='fp32')
    assert seen == [torch.bfloat16, torch.float32]
