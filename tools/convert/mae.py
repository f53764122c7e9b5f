"""Convert an MAE pre-training checkpoint to a densevit ViT (the encoder only).

    python tools/convert/mae.py work_dirs/mae_vit_shapes_quickstart/iter_N.pth checkpoints/mae-vit.pth
    python tools/convert/mae.py mae_pretrain_vit_base.pth checkpoints/mae-vit-b16.pth
    python tools/convert/mae.py model.safetensors checkpoints/mae-vit-b16.pth   # HF ViTMAE

Takes densevit's own MAE checkpoints (``backbone.*`` kept, decoder and head dropped),
the official facebookresearch/mae files (``{'model': ...}``, ``decoder_*`` and
``mask_token`` dropped; a file of the encoder alone is timm's layout) and Hugging Face
``ViTMAEForPreTraining`` / ``ViTMAEModel`` files (``decoder.*`` dropped); anything else
(a whole detector, an MMSegmentation ViT) is refused with the layout it is in. The
output loads with ``init_cfg=dict(type='Pretrained', checkpoint=OUT)`` into a ViT of
the checkpoint's width and depth. Conversion is not needed for that: the MAE file
itself can be given there and is converted on load (docs/checkpoints.md).
"""
import sys

from densevit.checkpoint.cli import run
from densevit.checkpoint.vit import convert_mae


def main(argv=None):
    return run(convert_mae, 'MAE (densevit, official or Hugging Face ViTMAE)', argv)


if __name__ == '__main__':
    sys.exit(main())
