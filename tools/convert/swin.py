"""Convert an official / timm / Hugging Face Swin checkpoint to densevit's layout.

    python tools/convert/swin.py swin_tiny_patch4_window7_224.pth checkpoints/swin-t.pth
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.swin import convert_swin


def main(argv=None):
    return run(convert_swin, 'Swin Transformer', argv)


if __name__ == '__main__':
    sys.exit(main())
