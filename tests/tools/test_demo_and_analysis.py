"""tools/demo.py, tools/analysis/{get_flops,benchmark,browse_dataset,print_config}.py and
benchmarks/dist_scaling.py, in-process on the tiny detector and segmentor."""
import json
from pathlib import Path

import cv2
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tiny_run import load_tool


def write_video(path, frames):
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 5, (w, h))
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()


def test_demo_image_folder_and_video(det, seg, tmp_path):
    demo = load_tool('tools/demo.py')
    images = sorted((det['data_root'] / 'val').glob('*.png'))
    assert demo.main([str(images[0]), det['config'], det['ckpt'], '--out-dir',
                      str(tmp_path / 'one'), '--score-thr', '0']) == 0
    drawn = cv2.imread(str(tmp_path / 'one' / images[0].name))
    assert drawn.shape == cv2.imread(str(images[0])).shape
    assert not (drawn == cv2.imread(str(images[0]))).all()  # boxes were drawn

    seg_dir = seg['data_root'] / 'images' / 'validation'
    assert demo.main([str(seg_dir), seg['config'], seg['ckpt'], '--out-dir',
                      str(tmp_path / 'folder')]) == 0
    assert sorted(p.name for p in (tmp_path / 'folder').iterdir()) == \
        sorted(p.name for p in seg_dir.glob('*.png'))

    video = tmp_path / 'clip.avi'
    write_video(video, [cv2.imread(str(p)) for p in images[:3]])
    assert demo.main([str(video), det['config'], det['ckpt'], '--out-dir', str(tmp_path / 'v'),
                      '--score-thr', '0']) == 0
    cap = cv2.VideoCapture(str(tmp_path / 'v' / 'clip.mp4'))
    frames = 0
    while cap.read()[0]:
        frames += 1
    assert frames == 3
    assert demo.main([str(video), det['config'], det['ckpt'], '--out-dir', str(tmp_path / 'f'),
                      '--frames']) == 0
    assert len(list((tmp_path / 'f' / 'clip').glob('*.png'))) == 3


def test_get_flops_counts_attention(det, capsys):
    tool = load_tool('tools/analysis/get_flops.py')

    class Attention(nn.Module):  # q = k = v: [1, 1, L=16, E=3]
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(torch.zeros(1))

        def forward(self, x, mode='tensor'):
            q = x.flatten(2).transpose(1, 2)[:, None]
            return F.scaled_dot_product_attention(q, q, q)

    info = tool.complexity(Attention(), (4, 4))
    assert info['flops'] == 16 * 16 * 3 * 2  # QK^T and attention x V, mmengine skips both
    assert tool.main([det['config'], '--shape', '48', '48']) == 0
    out = capsys.readouterr().out
    assert 'FLOPs:' in out and 'parameters:' in out


def test_benchmark_reports_throughput_latency_memory(det, tmp_path):
    tool = load_tool('tools/analysis/benchmark.py')
    out = tmp_path / 'bench.json'
    assert tool.main([det['config'], det['ckpt'], '--shape', '48', '48', '--batch', '2',
                      '--iters', '4', '--warmup', '1', '--json', str(out)]) == 0
    result = json.loads(out.read_text())['results']
    lat = result['latency_ms']
    assert result['images_per_s'] > 0 and 0 < lat['p50'] <= lat['p90'] <= lat['p99']
    if result['device'].startswith('cuda'):  # the tool's default device where CUDA is present
        assert result['peak_memory_mb'] > 0  # tensors on the GPU, measured: not 0
    else:
        assert 'peak_rss_growth_mb' in result and result['peak_rss_mb'] > 0


# mmengine's visualizer warns for boxes touching the right / bottom edge (x2 == width)
@pytest.mark.filterwarnings('ignore:Warning. The (bbox|polygon) is out of bounds')
def test_browse_dataset_writes_augmented_samples(det, seg, tmp_path):
    tool = load_tool('tools/analysis/browse_dataset.py')
    for run, name in ((det, 'det'), (seg, 'seg')):
        assert tool.main([run['config'], '--out-dir', str(tmp_path / name), '--num', '3']) == 0
        pngs = sorted((tmp_path / name).glob('*.png'))
        assert len(pngs) == 3 and cv2.imread(str(pngs[0])).shape == (48, 48, 3)


def test_print_config_merges_options(det, capsys, tmp_path):
    tool = load_tool('tools/analysis/print_config.py')
    assert tool.main([det['config'], '--cfg-options', 'train_cfg.max_iters=123',
                      '--save-path', str(tmp_path / 'dumped.py')]) == 0
    out = capsys.readouterr().out
    assert 'max_iters=123' in out and "type='DETR'" in out
    assert 'max_iters=123' in (tmp_path / 'dumped.py').read_text()


def test_dist_scaling_summary_from_logs(tmp_path):
    tool = load_tool('benchmarks/dist_scaling.py')
    log = tmp_path / '20260101_000000' / 'vis_data' / 'scalars.json'
    log.parent.mkdir(parents=True)
    log.write_text('\n'.join(json.dumps(dict(step=i, loss=1.0, time=t, data_time=d))
                             for i, (t, d) in enumerate([(5.0, 4.0), (1.0, 0.1), (1.0, 0.1),
                                                         (3.0, 0.3)], 1)) + '\n'
                   + json.dumps(dict(step=4, **{'coco/bbox_mAP': 0.1})) + '\n')
    records = tool.step_records(tmp_path)
    assert records == [(5.0, 4.0), (1.0, 0.1), (1.0, 0.1), (3.0, 0.3)]
    summary = tool.summarize(records, skip=1, batch=2, nproc=2)
    assert summary['step_s'] == 1.0 and summary['images_per_s'] == 4.0
    assert summary['data_share'] == pytest.approx(0.5 / 5.0)
    assert Path(tool.ROOT / 'tools' / 'dist_train.sh').is_file()
