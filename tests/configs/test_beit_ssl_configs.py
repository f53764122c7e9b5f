"""The BEiT quickstart: the MAE quickstart's ViT (width, depth, patches) with BEiT's relative
position bias and LayerScale, the MAE quickstart's images, and its encoder as the teacher."""
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'


def load(name):
    return Config.fromfile(str(CONFIGS / name))


def test_beit_quickstart_is_the_mae_quickstarts_vit_with_beits_position_code():
    beit = load('beit_ssl/beit_vit_shapes_quickstart.py')
    mae = load('mae/mae_vit_shapes_quickstart.py')
    m = beit.model
    assert (m.type, m.mask_ratio, m.min_num_patches, m.min_aspect) == ('BEiT', 0.4, 16, 0.3)
    backbone = dict(m.backbone)
    assert backbone.pop('pos_embed') == dict(type='relative', placement='every_layer_shared')
    assert backbone.pop('layer_scale_init_value') == 0.1
    assert backbone == mae.model.backbone
    # the teacher is the MAE quickstart's encoder, fed the same normalised images
    assert m.tokenizer.teacher == mae.model.backbone
    assert m.data_preprocessor == mae.model.data_preprocessor
    assert m.head.num_tokens == beit.num_tokens == 512
    for split in ('train', 'val'):
        assert beit[f'{split}_dataloader'].dataset == mae[f'{split}_dataloader'].dataset
    assert beit.val_evaluator.type == 'PretrainLossMetric'
    # the model builds (the tokenizer file is read at weight initialisation, not here)
    with DefaultScope.overwrite_default_scope('densevit'), torch.device('meta'):
        model = MODELS.build(m)
    assert model.num_masking_patches == 102  # 40% of 16 x 16
    assert model.tokenizer.codebook.shape == (512, 128)
