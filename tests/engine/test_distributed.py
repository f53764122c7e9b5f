"""Two processes on this CPU (gloo), launched by tools/dist_train.sh and tools/dist_test.sh.

- Training: after a few iterations both ranks hold identical parameters and buffers,
  equal to the checkpoint rank 0 saved (a detector, and a segmentor whose SyncBN
  layers run synchronised on CPU).
- Testing: on a validation set of odd size (the sampler pads it with a repeated
  image), the distributed run scores exactly what one process scores, every image
  once.
"""
import json
import pickle
from pathlib import Path

import pytest
import torch

import densevit  # noqa: F401  (allow-list for checkpoints)

from tiny_checkpoints import easy_ground_truth
from tiny_run import isolated, load_tool, run_launcher, unique_names, write_config, write_seg_config

# the CPU path (gloo, CPUDistributedDataParallel); with CUDA, tools/dev/gpu_check.sh runs
# dist_train.sh over NCCL instead
pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason='checks the CPU (gloo) path; CUDA machines: gpu_check.sh')

PROBE = """
custom_imports = dict(imports=['probe_hooks'], allow_failed_imports=False)
custom_hooks = [dict(type='NonFiniteLossHook'), dict(type='DumpRankStateHook')]
"""
SYNC_BN = """
norm_cfg = dict(type='SyncBN', requires_grad=True)
model = dict(decode_head=dict(norm_cfg=norm_cfg))
"""
NUM_VAL = 5  # odd: 2 ranks x 3 samples = one padding sample


def rank_states(work_dir):
    return [torch.load(Path(work_dir) / f'rank{r}_state.pth', weights_only=True) for r in (0, 1)]


def assert_same_state(a, b, exact=True):
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], msg=k)


def logged_metrics(work_dir):
    """The metrics tools/test.py wrote to <work_dir>/<timestamp>/<timestamp>.json."""
    (log_dir,) = [p for p in Path(work_dir).iterdir() if p.is_dir()]
    return json.loads((log_dir / f'{log_dir.name}.json').read_text())


@pytest.fixture(scope='module')
def dist_det(tmp_path_factory):
    """dist_train.sh, 2 processes, tiny DETR, 4 iterations, no validation."""
    root = tmp_path_factory.mktemp('dist_det')
    config = write_config(root, extra=PROBE)
    run_launcher('dist_train.sh', config, 2, '--work-dir', root / 'work', '--cfg-options',
                 'train_cfg.val_begin=100', cwd=root)
    return dict(root=root, config=config, ckpt=root / 'work' / 'iter_4.pth')


@pytest.fixture(scope='module')
def dist_seg(tmp_path_factory):
    """dist_train.sh, 2 processes, tiny SegFormer with SyncBN, validation at the end."""
    root = tmp_path_factory.mktemp('dist_seg')
    config = write_seg_config(root, extra=PROBE + SYNC_BN)
    run_launcher('dist_train.sh', config, 2, '--work-dir', root / 'work', cwd=root)
    return dict(root=root, config=config, ckpt=root / 'work' / 'iter_4.pth')


def test_detector_ranks_end_identical(dist_det):
    r0, r1 = rank_states(dist_det['root'] / 'work')
    assert r0['world_size'] == r1['world_size'] == 2
    assert r0['wrapper'] == 'CPUDistributedDataParallel'
    assert_same_state(r0['state_dict'], r1['state_dict'])
    ckpt = torch.load(dist_det['ckpt'], weights_only=True)
    assert_same_state(ckpt['state_dict'], r0['state_dict'])


def test_segmentor_ranks_end_identical_with_sync_bn(dist_seg):
    r0, r1 = rank_states(dist_seg['root'] / 'work')
    assert 'CPUSyncBatchNorm' in r0['norm_types']
    # running statistics too: each rank normalised with the statistics of both halves
    # (plain BN would leave each rank's running_mean from its own last batch)
    assert_same_state(r0['state_dict'], r1['state_dict'])
    ckpt = torch.load(dist_seg['ckpt'], weights_only=True)
    assert_same_state(ckpt['state_dict'], r0['state_dict'])


def test_dist_test_scores_as_one_process(dist_det):
    root, test_tool = dist_det['root'], load_tool('tools/test.py')
    with isolated():
        assert test_tool.main([dist_det['config'], str(dist_det['ckpt']), '--work-dir', str(root / 't0'),
                               '--cfg-options', f'test_evaluator.outfile_prefix={root}/single',
                               *unique_names()]) == 0
    easy = root / 'easy_val.json'
    easy_ground_truth(root / 'shapes/annotations/instances_val.json', root / 'single.bbox.json',
                      easy)
    options = ['--cfg-options', f'test_evaluator.ann_file={easy}']
    with isolated():
        assert test_tool.main([dist_det['config'], str(dist_det['ckpt']), '--work-dir', str(root / 't1'),
                               '--out', str(root / 'single.pkl'), *options, *unique_names()]) == 0
    run_launcher('dist_test.sh', dist_det['config'], dist_det['ckpt'], 2, '--work-dir', root / 't2',
                 '--out', root / 'dist.pkl', *options, cwd=root)

    single, dist = logged_metrics(root / 't1'), logged_metrics(root / 't2')
    keys = [k for k in single if k.startswith('coco/')]
    assert 0 < single['coco/bbox_mAP'] < 1
    assert {k: dist[k] for k in keys} == {k: single[k] for k in keys}
    # every image once: the padding sample was dropped, none is missing
    preds = []
    for name in ('single.pkl', 'dist.pkl'):  # DumpResults: a plain pickle we wrote ourselves
        with open(root / name, 'rb') as f:
            preds.append(pickle.load(f))
    assert [p['img_id'] for p in preds[1]] == [p['img_id'] for p in preds[0]] \
        == list(range(1, NUM_VAL + 1))
    for a, b in zip(*preds, strict=True):
        torch.testing.assert_close(b['pred_instances']['bboxes'], a['pred_instances']['bboxes'])
        torch.testing.assert_close(b['pred_instances']['scores'], a['pred_instances']['scores'])


def test_segmentor_dist_val_and_dist_test_score_as_one_process(dist_seg):
    root, test_tool = dist_seg['root'], load_tool('tools/test.py')
    with isolated():  # one process: the config's SyncBN becomes BN (no process group)
        assert test_tool.main([dist_seg['config'], str(dist_seg['ckpt']), '--work-dir', str(root / 't1'),
                               *['--cfg-options', *unique_names()]]) == 0
    run_launcher('dist_test.sh', dist_seg['config'], dist_seg['ckpt'], 2, '--work-dir', root / 't2',
                 cwd=root)
    single, dist = logged_metrics(root / 't1'), logged_metrics(root / 't2')
    # the validation the 2-process training ran at its last iteration, same weights
    (dist_val,) = [json.loads(line) for p in (root / 'work').glob('*/vis_data/scalars.json')
                   for line in p.read_text().splitlines() if 'mIoU' in line]
    for key in ('aAcc', 'mIoU', 'mAcc'):
        assert 0 < single[key] <= 100
        assert dist[key] == single[key] == dist_val[key], key


def _two_rank_worker(rank, port, out_dir):
    """One of two gloo processes: DETR's box normaliser and CPUSyncBatchNorm, per rank."""
    import torch.distributed as dist
    from torch import nn

    from densevit.engine.sync_bn import CPUSyncBatchNorm, convert_sync_bn_for_cpu
    from densevit.models.losses.set_criterion import num_boxes_across_ranks

    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                            world_size=2)
    try:
        # rank 0 holds 3 target boxes over 2 images, rank 1 holds 1: both normalise by 2
        targets = ([dict(labels=torch.zeros(2)), dict(labels=torch.zeros(1))] if rank == 0
                   else [dict(labels=torch.zeros(1)), dict(labels=torch.zeros(0))])
        num_boxes = num_boxes_across_ranks(targets, 'cpu')

        torch.manual_seed(0)
        full = torch.randn(6, 3, 4, 4) * 3 + 1  # the same on both ranks
        bn = nn.SyncBatchNorm(3)
        assert convert_sync_bn_for_cpu(nn.Sequential(bn)) == 1 and type(bn) is CPUSyncBatchNorm
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1., 2., 3.]))
        x = full[3 * rank:3 * rank + 3].clone().requires_grad_()
        out = bn(x)
        (out * torch.arange(out.numel()).view_as(out).sin() ** 2).sum().backward()
        torch.save(dict(num_boxes=num_boxes, out=out.detach(), x_grad=x.grad,
                        w_grad=bn.weight.grad, running_mean=bn.running_mean,
                        running_var=bn.running_var),
                   f'{out_dir}/rank{rank}.pth')
    finally:
        dist.destroy_process_group()


def test_box_normaliser_and_sync_bn_across_two_processes(tmp_path):
    """Forked ranks: num_boxes averaged over ranks; SyncBN on two halves == BN on the batch."""
    import multiprocessing as mp

    from tiny_run import free_port
    ctx, port = mp.get_context('fork'), free_port()
    procs = [ctx.Process(target=_two_rank_worker, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    r0, r1 = (torch.load(tmp_path / f'rank{r}.pth', weights_only=True) for r in (0, 1))
    assert r0['num_boxes'] == r1['num_boxes'] == 2.0

    # reference: plain BN in one process on the whole batch of 6, same loss
    torch.manual_seed(0)
    full = (torch.randn(6, 3, 4, 4) * 3 + 1).requires_grad_()
    bn = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1., 2., 3.]))
    out = bn(full)
    weights = torch.cat([torch.arange(out[:3].numel()).view_as(out[:3]).sin() ** 2] * 2)
    (out * weights).sum().backward()
    torch.testing.assert_close(torch.cat([r0['out'], r1['out']]), out.detach())
    torch.testing.assert_close(torch.cat([r0['x_grad'], r1['x_grad']]), full.grad)
    # DDP would average the weight gradients over ranks; their sum is the full-batch one
    torch.testing.assert_close(r0['w_grad'] + r1['w_grad'], bn.weight.grad)
    for key in ('running_mean', 'running_var'):
        torch.testing.assert_close(r0[key], getattr(bn, key))
        torch.testing.assert_close(r1[key], getattr(bn, key))
