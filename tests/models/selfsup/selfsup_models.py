"""Tiny MAE / masked-patch-prediction models for the self-supervised tests (imported by name:
pytest puts this test folder on the path)."""
import torch
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
PREPROCESSOR = dict(type='ImgDataPreprocessor', mean=[123.675, 116.28, 103.53],
                    std=[58.395, 57.12, 57.375], bgr_to_rgb=True)
# every position-embedding type and placement a densevit ViT offers
PE_CONFIGS = [None, 'learned_1d', 'learned_2d', 'sincos_2d',
              dict(type='learned_1d', placement='every_layer'),
              dict(type='learned_2d', placement='every_layer_shared'),
              dict(type='sincos_2d', placement='every_layer'),
              dict(type='relative'), dict(type='relative', placement='every_layer_shared')]


def pe_id(pe):
    return 'none' if pe is None else pe if isinstance(pe, str) else '-'.join(pe.values())


def vit_cfg(img_size=32, patch_size=8, **kwargs):
    return dict(type='VisionTransformer', arch=TINY, img_size=img_size, patch_size=patch_size,
                **kwargs)


def build(cfg, seed=0):
    """Build a model config in scope densevit, its weights initialised from ``seed``."""
    torch.manual_seed(seed)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg)
    model.init_weights()
    return model


def mae_cfg(mask_ratio=0.75, norm_pix=True, masked_only=True, **backbone):
    return dict(type='MAE', mask_ratio=mask_ratio, data_preprocessor=PREPROCESSOR,
                backbone=vit_cfg(**backbone),
                neck=dict(type='MAEPretrainDecoder', embed_dims=16, num_layers=1, num_heads=2),
                head=dict(type='MAEPretrainHead', norm_pix=norm_pix, masked_only=masked_only))


def mpp_cfg(mask_ratio=0.5, **backbone):
    return dict(type='MaskedPatchPrediction', mask_ratio=mask_ratio,
                data_preprocessor=PREPROCESSOR, backbone=vit_cfg(**backbone),
                head=dict(type='MPPHead'))
