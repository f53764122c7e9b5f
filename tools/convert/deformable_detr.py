"""Convert a Hugging Face Deformable DETR checkpoint (the whole detector) to densevit's layout.

    python tools/convert/deformable_detr.py model.safetensors checkpoints/deformable_detr.pth

Box refinement is inferred from the checkpoint (per-layer ``class_embed.N`` differ);
load the result in a DeformableDETR config with the same ``with_box_refine``,
``as_two_stage`` (HF ``two_stage``: the checkpoint has ``enc_output`` / ``pos_trans``),
``num_classes`` and levels.
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.deformable_detr import convert_deformable_detr


def main(argv=None):
    return run(convert_deformable_detr, 'Deformable DETR', argv)


if __name__ == '__main__':
    sys.exit(main())
