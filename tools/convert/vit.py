"""Convert a timm (DeiT, AugReg, MAE) / Hugging Face ViT checkpoint to densevit's layout.

    python tools/convert/vit.py model.safetensors checkpoints/vit-b16.pth
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.vit import convert_vit


def main(argv=None):
    return run(convert_vit, 'ViT', argv)


if __name__ == '__main__':
    sys.exit(main())
