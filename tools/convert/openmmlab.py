"""Convert an MMSegmentation / MMDetection checkpoint (or any whole model densevit knows) to
densevit's layout.

    python tools/convert/openmmlab.py setr_vit-l_pup_8xb2-160k_ade20k-512x512.pth setr-pup.pth
    python tools/convert/openmmlab.py deformable-detr_r50_16xb2-50e_coco.pth ddetr.pth
    python tools/convert/openmmlab.py swin_tiny_patch4_window7_224.pth swin-t.pth   # backbone

The family is recognised from the keys (see docs/checkpoints.md): a whole model
(``state_dict`` + ``meta`` as mmengine saves it) becomes a densevit detector or
segmentor state dict; a backbone-only file (mmseg's ImageNet Swin / ViT / MiT
files) a backbone state dict. The tool prints the layout and the key counts. A
file recognised only in part is refused (``--keep-unmatched`` writes it anyway,
with a warning that it is partial).

Conversion is not needed to evaluate: ``tools/test.py CONFIG ORIGINAL.pth`` and
``densevit.apis.init_model(CONFIG, ORIGINAL.pth)`` convert on load.
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.model import convert_any


def main(argv=None):
    return run(convert_any, 'MMSegmentation / MMDetection (or other known)', argv)


if __name__ == '__main__':
    sys.exit(main())
