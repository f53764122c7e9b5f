"""DETR decoder attention of each detected object, overlaid on the image (DETR paper, Fig. 6).

    python tools/analysis/detr_attention.py CONFIG CHECKPOINT IMAGES... [--score-thr 0.5]

For every detection above ``--score-thr`` (at most ``--max-dets`` per image):
the last decoder layer's cross-attention of its query, averaged over heads,
upsampled to the image, with its box. Writes ``detr_attention_<i>.png`` per
image and ``detr_attention.json`` (per image: boxes, scores, labels, [h, w] maps).
"""
import os.path as osp

import mmcv
import torch.nn.functional as F

from densevit.analysis.attention_capture import capture_attention
from densevit.analysis.attention_rollout import decoder_query_maps
from densevit.analysis.cli import Timer, base_parser, setup, write_json
from densevit.analysis.inputs import bgr_to_rgb, list_images
from densevit.analysis.plots import overlay_maps
from densevit.apis import inference


def image_maps(maps, meta):
    """[k, h, w] over the padded batch's feature grid -> [k, H0, W0] on the original image."""
    H, W = meta['batch_input_shape']
    m = F.interpolate(maps[:, None], size=(H, W), mode='bilinear', align_corners=False)[:, 0]
    h, w = meta['img_shape'][:2]
    m = m[:, :h, :w]  # drop batch padding (bottom / right)
    oh, ow = meta.get('ori_shape', (h, w))[:2]
    m = F.interpolate(m[:, None], size=(oh, ow), mode='bilinear', align_corners=False)[:, 0]
    lo = m.flatten(1).min(1).values[:, None, None]
    hi = m.flatten(1).max(1).values[:, None, None]
    return ((m - lo) / (hi - lo).clamp_min(1e-12)).numpy()


def main():
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument('images', nargs='+', help='image files or folders')
    p.add_argument('--num-images', type=int, default=8)
    p.add_argument('--score-thr', type=float, default=0.5)
    p.add_argument('--max-dets', type=int, default=6)
    args = p.parse_args()
    model, _ = setup(args)
    classes = (model.dataset_meta or {}).get('classes')
    stride = (model.neck or model.backbone).out_strides[model.feat_index]
    out = []
    with Timer() as t:
        for n, path in enumerate(list_images(args.images)[:args.num_images]):
            with capture_attention(model, self_attn=False) as rec:
                ds = inference(model, path)
            pred, meta = ds.pred_instances, ds.metainfo
            keep = (pred.scores > args.score_thr).nonzero()[:, 0]
            keep = keep[pred.scores[keep].argsort(descending=True)][:args.max_dets].tolist()
            H, W = meta['batch_input_shape']
            hw = (-(-H // stride), -(-W // stride))
            queries = pred.queries[keep].tolist()  # the decoder query behind each detection
            maps = decoder_query_maps(rec.cross_attn[-1][0], hw, queries)  # last layer, image 0
            labels = [classes[i] if classes else str(i) for i in pred.labels[keep].tolist()]
            titles = [f'{lb} {s:.2f}' for lb, s in zip(labels, pred.scores[keep].tolist(), strict=True)]
            png = osp.join(args.out_dir, f'detr_attention_{n}.png')
            overlay_maps(bgr_to_rgb(mmcv.imread(path)), image_maps(maps, meta), png,
                         boxes=pred.bboxes[keep].tolist(), titles=titles)
            out.append(dict(image=path, queries=queries, boxes=pred.bboxes[keep].tolist(),
                            scores=pred.scores[keep].tolist(), labels=labels, grid=list(hw),
                            maps=maps.tolist()))
            print(png)
    print(write_json(args, 'detr_attention.json',
                     dict(images=out, seconds=round(t.seconds, 2))))


if __name__ == '__main__':
    main()
