"""Convert a timm (DeiT, AugReg, MAE) / Hugging Face ViT checkpoint to densevit's layout.

    python tools/convert/vit.py model.safetensors checkpoints/vit-b16.pth
"""
import sys

from _common import run

from densevit.models.backbones.vit_convert import convert_vit


def main(argv=None):
    return run(convert_vit, 'ViT', argv)


if __name__ == '__main__':
    sys.exit(main())
