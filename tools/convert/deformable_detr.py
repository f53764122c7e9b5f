"""Convert a whole Deformable DETR checkpoint (MMDetection 3.x, official
fundamentalvision/Deformable-DETR or Hugging Face) to densevit's layout.

    python tools/convert/deformable_detr.py deformable-detr_r50_16xb2-50e_coco.pth out.pth
    python tools/convert/deformable_detr.py model.safetensors checkpoints/deformable_detr.pth

The origin is recognised by its keys; box refinement is read from the checkpoint
(per-layer predictors differ). Load the result in a DeformableDETR config with the same
``with_box_refine``, ``as_two_stage`` (the checkpoint has ``memory_trans_fc`` /
``enc_output`` / ``pos_trans``), ``num_classes`` and levels. mmdet zoo files need no
conversion first: ``tools/test.py`` converts them when it loads them.
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.deformable_detr import convert_deformable_detr


def main(argv=None):
    return run(convert_deformable_detr, 'Deformable DETR', argv)


if __name__ == '__main__':
    sys.exit(main())
