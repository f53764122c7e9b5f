"""Write dataset samples *after* the pipeline (augmentations included) as PNGs.

    python tools/analysis/browse_dataset.py CONFIG --out-dir DIR [--num 20] [--split train]

Each PNG is the image the model would see (before normalisation) with its ground
truth: boxes in that image's pixels (the DataSample contract), or the class map
blended over it. Checks what augmentations and annotation loading really produce.
"""
import argparse
import os
import os.path as osp
import sys

import cv2
from mmengine.config import Config, DictAction
from mmengine.registry import init_default_scope

from densevit.registry import DATASETS, VISUALIZERS


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Draw augmented dataset samples')
    p.add_argument('config')
    p.add_argument('--out-dir', required=True)
    p.add_argument('--num', type=int, default=20, help='how many samples')
    p.add_argument('--split', choices=['train', 'val', 'test'], default='train')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return p.parse_args(argv)


def sample_name(index, data_sample):
    path = data_sample.metainfo.get('img_path')
    stem = osp.splitext(osp.basename(path))[0] if path else 'sample'
    return f'{index:05d}_{stem}.png'


def draw_sample(visualizer, item, bgr_inputs=True):
    """The packed image (HWC RGB) with its ground truth drawn over it."""
    image = item['inputs'].permute(1, 2, 0).numpy()
    image = image[..., ::-1] if bgr_inputs else image
    image = image.clip(0, 255).astype('uint8').copy()
    sample = item['data_samples']
    if 'gt_instances' in sample:
        return visualizer.draw_instances(image, sample.gt_instances)
    if 'gt_sem_seg' in sample:
        return visualizer.draw_sem_seg(image, sample.gt_sem_seg)
    return image


def main(argv=None):
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'densevit'))
    dataset = DATASETS.build(cfg[f'{args.split}_dataloader']['dataset'])
    vis_cfg = dict(cfg.visualizer, name=f'browse_dataset_{os.getpid()}', vis_backends=None,
                   save_dir=None)
    visualizer = VISUALIZERS.build(vis_cfg)
    visualizer.dataset_meta = dataset.metainfo
    # LoadImage gives BGR; the data preprocessor's bgr_to_rgb says the model expects that
    bgr = cfg.model.get('data_preprocessor', {}).get('bgr_to_rgb', True)
    os.makedirs(args.out_dir, exist_ok=True)
    num = min(args.num, len(dataset))
    for i in range(num):
        item = dataset[i]
        drawn = draw_sample(visualizer, item, bgr)
        cv2.imwrite(osp.join(args.out_dir, sample_name(i, item['data_samples'])), drawn[..., ::-1])
    print(f'densevit: wrote {num} samples of the {args.split} set to {args.out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
