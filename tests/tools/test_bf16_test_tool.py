"""tools/test.py --bf16 (and mmengine's own ``test_cfg.fp16=True``) through CocoMetric and
IoUMetric: float32 predictions reach the metric, scores equal fp32's on the tiny models."""
import json
import pickle
from pathlib import Path

import pytest
import torch

from tiny_checkpoints import trained_checkpoint
from tiny_run import isolated, load_tool, unique_names


@pytest.fixture(scope='module')
def test_tool():
    return load_tool('tools/test.py')


def run_test(test_tool, run, work_dir, *extra):
    """Metrics of one tools/test.py run (from its log folder's ``<timestamp>.json``)."""
    with isolated():
        rc = test_tool.main([run['config'], run['ckpt'], '--work-dir', str(work_dir), *extra,
                             '--cfg-options', *unique_names()])
    assert rc == 0
    logs = [p for p in Path(work_dir).glob('*/*.json')]
    assert len(logs) == 1, logs
    return json.loads(logs[0].read_text())


@pytest.mark.parametrize('switch', [['--bf16'], ['test_cfg.fp16=True']])
def test_detection_metric_in_bf16(tmp_path_factory, test_tool, tmp_path, switch):
    """CocoMetric accepts the bf16 run's predictions (float32 boxes) and scores them as fp32's
    to 0.001, by our switch and by mmengine's (bf16 autocast on a CPU)."""
    det = trained_checkpoint(tmp_path_factory, 'det')
    ref = run_test(test_tool, det, tmp_path / 'fp32')
    if switch[0].startswith('--'):
        low = run_test(test_tool, det, tmp_path / 'bf16', *switch, '--out',
                       str(tmp_path / 'preds.pkl'))
        with open(tmp_path / 'preds.pkl', 'rb') as f:
            preds = pickle.load(f)
        assert all(p['pred_instances']['bboxes'].dtype == torch.float32 for p in preds)
    else:  # mmengine's switch: given through --cfg-options, with the run's own names
        with isolated():
            rc = test_tool.main([det['config'], det['ckpt'], '--work-dir', str(tmp_path / 'b'),
                                 '--cfg-options', *switch, *unique_names()])
        assert rc == 0
        low = json.loads(next((tmp_path / 'b').glob('*/*.json')).read_text())
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
    assert json.loads(out.read_text())['precision'] == 'bf16'
    model = init_model(det['config'], det['ckpt'])
    seen = []
    linear = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    tool.benchmark(model, (48, 48), iters=1, warmup=0, precision='bf16')
    tool.benchmark(model, (48, 48), iters=1, warmup=0, precision='fp32')
    assert seen == [torch.bfloat16, torch.float32]
