"""Share of a DETR training step spent in Hungarian matching.

    python benchmarks/matcher_share.py configs/detr_vit.py --size 512 512 --batch 2 [--json FILE]

Times full training steps (forward, loss, backward, optimizer) on random images with
``--boxes`` random ground-truth boxes each, and the matcher calls inside them (one
per decoder layer with auxiliary losses). Prints a table and the share in percent;
``--json FILE`` writes them with the command, commit, CPU and thread count
(``densevit.utils.provenance``).
"""
import argparse
import time

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData

import densevit  # noqa: F401
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.provenance import add_json_argument, write_result


def random_batch(batch, size, num_boxes, generator):
    h, w = size
    samples = []
    for _ in range(batch):
        xy = torch.rand(num_boxes, 2, generator=generator) * torch.tensor([w * 0.7, h * 0.7])
        wh = torch.rand(num_boxes, 2, generator=generator) * torch.tensor([w * 0.3, h * 0.3]) + 4
        gt = InstanceData()
        gt.bboxes = torch.cat([xy, xy + wh], 1)
        gt.labels = torch.randint(0, 80, (num_boxes,), generator=generator)
        ds = DataSample(metainfo=dict(img_shape=(h, w)))
        ds.gt_instances = gt
        samples.append(ds)
    return torch.rand(batch, 3, h, w, generator=generator), samples


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('config')
    p.add_argument('--size', type=int, nargs=2, default=(512, 512), metavar=('H', 'W'))
    p.add_argument('--batch', type=int, default=2)
    p.add_argument('--boxes', type=int, default=7, help='ground-truth boxes per image (COCO: ~7)')
    p.add_argument('--steps', type=int, default=5)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    add_json_argument(p)
    args = p.parse_args(argv)

    cfg = Config.fromfile(args.config)
    cfg.model.backbone.pop('init_cfg', None)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model).to(args.device).train()
    matcher = model.bbox_head.criterion.matcher
    spent = []
    original = type(matcher).__call__

    def timed(self, *a, **k):
        if args.device == 'cuda':
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = original(self, *a, **k)
        spent.append(time.perf_counter() - t)
        return out

    type(matcher).__call__ = timed
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    inputs, samples = random_batch(args.batch, args.size, args.boxes, g)
    inputs = inputs.to(args.device)
    for ds in samples:
        ds.gt_instances = ds.gt_instances.to(args.device)
    step_times = []
    for i in range(args.steps + 1):
        spent_before = len(spent)
        t = time.perf_counter()
        loss = sum(model(inputs, samples, mode='loss').values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.device == 'cuda':
            torch.cuda.synchronize()
        if i > 0:  # the first step warms up
            step_times.append((time.perf_counter() - t, sum(spent[spent_before:])))
    type(matcher).__call__ = original
    step = sum(s for s, _ in step_times) / len(step_times)
    match = sum(m for _, m in step_times) / len(step_times)
    calls = len(spent) // (args.steps + 1)
    print(f'config {args.config}, batch {args.batch} x {args.size[0]}x{args.size[1]}, '
          f'{model.bbox_head.num_queries} queries, {args.boxes} boxes/image, {args.device}')
    print(f'| training step | matching ({calls} calls) | share |')
    print('|---|---|---|')
    print(f'| {step * 1000:.1f} ms | {match * 1000:.2f} ms | {100 * match / step:.2f}% |')
    if args.json:
        write_result(args.json, dict(step_ms=step * 1000, matching_ms=match * 1000,
                                     matcher_calls=calls, share=match / step),
                     config=args.config, size=list(args.size), batch=args.batch,
                     queries=model.bbox_head.num_queries, boxes=args.boxes, steps=args.steps,
                     device=args.device)


if __name__ == '__main__':
    main()
