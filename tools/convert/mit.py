"""Convert an official / Hugging Face / MMSegmentation SegFormer (MiT) checkpoint to densevit's
layout.

    python tools/convert/mit.py mit_b0.pth checkpoints/mit-b0.pth              # the encoder
    python tools/convert/mit.py segformer.b0.512x512.ade.160k.pth segformer-b0.pth  # whole model

A file with a decode head becomes a whole ``EncoderDecoder`` state dict
(``backbone.*`` + ``decode_head.*``); an encoder-only file a backbone state dict.
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.mit import convert_mit, convert_segformer


def convert(state_dict, strict=True):
    # Both converters are always strict: they raise on keys they cannot place.
    if any(k.startswith('decode_head.') for k in state_dict):
        return convert_segformer(state_dict)
    return convert_mit(state_dict)


def main(argv=None):
    return run(convert, 'SegFormer / MiT', argv)


if __name__ == '__main__':
    sys.exit(main())
