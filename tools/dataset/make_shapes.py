r"""Write the procedural shapes data set (train and val splits) in COCO format.

    python tools/dataset/make_shapes.py data/shapes --num-train 2000 --num-val 200 \
        --size 256 256 --seed 0

writes data/shapes/{train,val}/NNNNNN.png and data/shapes/annotations/instances_{train,val}.json
(each annotation's mask as COCO RLE). With --panoptic, the COCO panoptic version: also
annotations/panoptic_{train,val}.json and the PNGs of annotations/panoptic_{train,val}/
(densevit/datasets/shapes_panoptic.py).
"""
import argparse
import json
import os.path as osp

from densevit.datasets.shapes import generate_shapes
from densevit.datasets.shapes_panoptic import generate_shapes_panoptic


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out_dir', help='root folder to write')
    parser.add_argument('--num-train', type=int, default=1000, help='train images')
    parser.add_argument('--num-val', type=int, default=100, help='val images')
    parser.add_argument('--size', type=int, nargs=2, default=(256, 256), metavar=('H', 'W'),
                        help='image height and width')
    parser.add_argument('--seed', type=int, default=0, help='same seed, same bytes')
    parser.add_argument('--max-objects', type=int, default=6, help='max shapes per image')
    parser.add_argument('--panoptic', action='store_true',
                        help='write the panoptic version (shapes on textured stuff bands)')
    return parser.parse_args()


def main():
    args = parse_args()
    for split, num in (('train', args.num_train), ('val', args.num_val)):
        generate = generate_shapes_panoptic if args.panoptic else generate_shapes
        ann_file = generate(args.out_dir, split, num, img_size=tuple(args.size),
                            seed=args.seed, max_objects=args.max_objects)
        instances = osp.join(osp.dirname(ann_file), f'instances_{split}.json')
        with open(instances) as f:
            num_anns = len(json.load(f)['annotations'])
        print(f'{split}: {num} images ({args.size[0]}x{args.size[1]}), {num_anns} boxes '
              f'-> {args.out_dir}/{split}/, {ann_file}')


if __name__ == '__main__':
    main()
