"""Convert a checkpoint in any layout densevit knows to densevit's layout.

    python tools/convert/checkpoint.py setr_vit-l_pup_8xb2-160k_ade20k-512x512.pth setr-pup.pth
    python tools/convert/checkpoint.py deformable-detr_r50_16xb2-50e_coco.pth ddetr.pth
    python tools/convert/checkpoint.py detr-resnet-50/model.safetensors detr-r50.pth  # HF
    python tools/convert/checkpoint.py swin_tiny_patch4_window7_224.pth swin-t.pth   # backbone
    python tools/convert/checkpoint.py vit-base-patch16-224/model.safetensors vit-b16.pth

Whole models: MMSegmentation / MMDetection (SETR, SegFormer, UperNet-Swin, DETR, Deformable
DETR), Hugging Face (DETR, Deformable / Conditional / DAB-DETR, SegFormer, UperNet-Swin, EoMT,
Mask2Former-Swin) and the official repositories (DETR, Deformable DETR, SegFormer).
Backbones: ViT (timm, HF, MMSegmentation, MAE's encoder file), Swin (official, timm,
HF, MMSegmentation), MiT (official, HF, MMSegmentation), also under ``backbone.`` (an
mmpretrain classifier, a segmentor without its heads). The output records the origin's
layout and backbone options in its meta. MAE pre-training checkpoints (with a decoder):
``tools/convert/mae.py``.

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
from densevit.checkpoint.convert import convert_any


def main(argv=None):
    return run(convert_any, 'MMSegmentation / MMDetection / HF / timm / official', argv)


if __name__ == '__main__':
    sys.exit(main())
