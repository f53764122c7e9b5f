"""Convert an official / Hugging Face DETR checkpoint (the whole detector) to densevit's layout.

    python tools/convert/detr.py detr-r50-e632da11.pth checkpoints/detr-r50.pth

Load the result with ``load_from`` in a DETR config whose ``num_classes`` matches
the checkpoint's classifier (official COCO files: 91 + no-object).
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.detr import convert_detr


def main(argv=None):
    return run(convert_detr, 'DETR', argv)


if __name__ == '__main__':
    sys.exit(main())
