"""Make BEiT's visual tokenizer: a k-means codebook over a teacher ViT's patch features.

    python tools/pretrain/make_tokenizer.py TEACHER_CONFIG CHECKPOINT --out FILE [--k 512]

TEACHER_CONFIG and CHECKPOINT: a densevit model with a ViT backbone (e.g. the MAE quickstart,
configs/mae/mae_vit_shapes_10k.py, and work_dirs/mae_vit_shapes_10k/iter_10000.pth), or
``none`` for random weights (tests). The images: the config's training set (``--folder DIR``:
another), each through the config's validation pipeline (a whole image at the backbone's
size) and data preprocessor. For each image, every patch's output of teacher layer
``--layer`` (-1: the last, with its final norm) is one feature; ``--max-features`` of them,
drawn at random, are clustered into ``--k`` codewords by SciPy's k-means
(``scipy.cluster.vq.kmeans2``, from a k-means++ start, ``--iters`` rounds), on unit-length
features unless ``--no-normalize``. Writes FILE (``torch.save``: ``codebook``, the teacher's
``teacher`` state dict and ``meta``: see ``densevit/models/selfsup/tokenizer.py``) and prints
the codebook's use on the clustered patches (``--json FILE``: the metadata, with the command,
commit and machine).
"""
import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from mmengine.dataset import pseudo_collate
from scipy.cluster.vq import kmeans2

from densevit.analysis.inputs import find_vit
from densevit.apis import init_model
from densevit.checkpoint.model import CHECKPOINT_ERRORS
from densevit.models.selfsup.tokenizer import nearest_codeword, patch_features
from densevit.registry import DATASETS
from densevit.utils.provenance import add_json_argument, write_result


def image_dataset(cfg, folder, num_images):
    """The training images (or ``folder``'s) with the validation pipeline."""
    train = dict(cfg.train_dataloader.dataset)
    val = cfg.get('val_dataloader') or cfg.get('test_dataloader')
    if not val:
        raise ValueError('the config has no val_dataloader or test_dataloader (its pipeline '
                         'reads a whole image)')
    train['pipeline'] = val['dataset']['pipeline']
    train['test_mode'] = True
    if folder:
        train = dict(type='UnlabelledImageDataset', data_root=folder, test_mode=True,
                     pipeline=train['pipeline'])
    dataset = DATASETS.build(train)
    return dataset, min(num_images or len(dataset), len(dataset))


@torch.no_grad()
def teacher_features(model, vit, dataset, count, batch_size=32):
    """[count * N, D] float32: every patch feature of the first ``count`` images."""
    feats = []
    for start in range(0, count, batch_size):
        data = pseudo_collate([dataset[i] for i in range(start, min(start + batch_size, count))])
        inputs = model.data_preprocessor(data, False)['inputs']
        feats.append(patch_features(vit, inputs).flatten(0, 1).float())
    return torch.cat(feats)


def kmeans_plus_plus(data, k, rng):
    """k-means++ starting codewords (Arthur and Vassilvitskii 2007): each next one drawn with
    probability proportional to the squared distance to the nearest one drawn so far. The
    distances are updated per codeword, O(k n d); SciPy's ``minit='++'`` recomputes them
    from every codeword each step, O(k^2 n d), too slow for 512 words of 100,000 patches."""
    first = data[rng.integers(len(data))]
    centres = [first]
    d2 = ((data - first) ** 2).sum(1, dtype=np.float64)
    for _ in range(1, k):
        total = d2.sum()
        i = rng.choice(len(data), p=d2 / total) if total > 0 else rng.integers(len(data))
        centres.append(data[i])
        d2 = np.minimum(d2, ((data - data[i]) ** 2).sum(1, dtype=np.float64))
    return np.stack(centres)


def usage(ids, k):
    """(share of the k codewords used, perplexity of the token distribution)."""
    p = torch.bincount(ids, minlength=k).double() / ids.numel()
    entropy = -(p[p > 0] * p[p > 0].log()).sum().item()
    return (p > 0).double().mean().item(), math.exp(entropy)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument('config', help='the teacher model config (e.g. the MAE quickstart)')
    p.add_argument('checkpoint', help="its weights, or 'none' (random)")
    p.add_argument('--out', required=True, help='the tokenizer file to write')
    p.add_argument('--k', type=int, default=512, help='codebook size (default 512)')
    p.add_argument('--layer', type=int, default=-1, help='teacher layer (default -1: the last)')
    p.add_argument('--num-images', type=int, default=1000,
                   help='images read (default 1000; 0: all)')
    p.add_argument('--max-features', type=int, default=100000,
                   help='patch features clustered, drawn at random (default 100000)')
    p.add_argument('--iters', type=int, default=20, help='k-means rounds (default 20)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--folder', help="images from this folder instead of the config's training set")
    p.add_argument('--no-normalize', action='store_true',
                   help='cluster the raw features (default: unit length, cosine k-means)')
    add_json_argument(p, "the file's metadata (codebook use included)")
    args = p.parse_args(argv)
    normalize = not args.no_normalize
    try:
        checkpoint = None if args.checkpoint == 'none' else args.checkpoint
        model = init_model(args.config, checkpoint)
        vit = find_vit(model)
        if not -vit.num_layers <= args.layer < vit.num_layers:
            raise ValueError(f'--layer {args.layer}: the teacher has {vit.num_layers} layers')
        vit.out_indices = [args.layer % vit.num_layers]
        dataset, count = image_dataset(model.cfg, args.folder, args.num_images)
        if count == 0:
            raise ValueError('no images')
        feats = teacher_features(model, vit, dataset, count)
    except (*CHECKPOINT_ERRORS, FileNotFoundError, ValueError) as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    if normalize:
        feats = F.normalize(feats, dim=1)
    rng = np.random.default_rng(args.seed)
    if len(feats) > args.max_features:
        feats = feats[torch.from_numpy(rng.choice(len(feats), args.max_features, replace=False))]
    if len(feats) < args.k:
        print(f'densevit: {len(feats)} patch features for {args.k} codewords; read more images '
              f'or lower --k', file=sys.stderr)
        return 1
    data = feats.numpy()
    centroids, _ = kmeans2(data, kmeans_plus_plus(data, args.k, rng), iter=args.iters,
                           minit='matrix')
    codebook = torch.from_numpy(centroids).float()
    if normalize:
        codebook = F.normalize(codebook, dim=1)
    used, perplexity = usage(nearest_codeword(feats, codebook, normalize), args.k)
    teacher_backbone = model.cfg.model.backbone
    meta = dict(teacher_config=str(args.config), teacher_checkpoint=str(args.checkpoint),
                teacher_backbone=json.dumps(teacher_backbone.to_dict()
                                            if hasattr(teacher_backbone, 'to_dict')
                                            else dict(teacher_backbone), default=str),
                layer=args.layer, k=args.k, normalize=normalize, num_images=count,
                image_folder=str(args.folder or dataset.data_root), num_features=len(feats),
                iterations=args.iters, seed=args.seed, usage=used, perplexity=perplexity)
    state = {k: v.clone() for k, v in vit.state_dict().items()}
    torch.save(dict(codebook=codebook, teacher=state, meta=meta), args.out)
    print(f'wrote {args.out}: {args.k} codewords of {codebook.shape[1]} dimensions from '
          f'{len(feats)} patches of {count} images (teacher layer {args.layer}); '
          f'{used:.1%} of the codewords used, perplexity {perplexity:.1f}')
    if args.json:
        write_result(args.json, meta, tokenizer=args.out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
