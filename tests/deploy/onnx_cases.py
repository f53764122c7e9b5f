"""Tiny models of each exportable family (random weights), by name."""
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

from tiny_run import REPO

K = 3
VIT = dict(type='VisionTransformer', img_size=64, patch_size=8, with_cls_token=True,
           arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
           drop_path_rate=0.0)
BN = dict(type='BN')


def _setr_up(num_convs, up_scale, kernel_size):
    return dict(type='EncoderDecoder', backbone=VIT, decode_head=dict(
        type='SETRUPHead', in_channels=32, channels=16, in_index=-1, num_classes=K,
        dropout_ratio=0, norm_cfg=BN, num_convs=num_convs, up_scale=up_scale,
        kernel_size=kernel_size))


def _deformable(refine=False, two_stage=False):
    return dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3)),
        bbox_head=dict(type='DeformableDETRHead', num_classes=K, embed_dims=32, num_queries=6,
                       num_feature_levels=4, with_box_refine=refine, num_dets=10,
                       as_two_stage=two_stage,
                       transformer=dict(num_heads=2, num_points=2, num_encoder_layers=1,
                                        num_decoder_layers=2, feedforward_channels=32,
                                        dropout=0.0)))


def _tiny_config(name):
    return Config.fromfile(str(REPO / 'tests' / 'configs' / name)).model.to_dict()


MODEL_CFGS = {
    'segformer_mit': lambda: _tiny_config('tiny_segformer_shapes.py'),
    'setr_naive_vit': lambda: _setr_up(1, 4, 1),
    'setr_pup_vit': lambda: _setr_up(2, 2, 3),
    'setr_mla_vit': lambda: dict(
        type='EncoderDecoder', backbone=dict(VIT, out_indices=(0, 1, 2, 3),
                                             with_cls_token=False, arch=dict(VIT['arch'],
                                                                             num_layers=4)),
        neck=dict(type='MLANeck', in_channels=[32] * 4, out_channels=16, norm_cfg=BN,
                  act_cfg=dict(type='ReLU')),
        decode_head=dict(type='SETRMLAHead', in_channels=(16,) * 4, in_index=(0, 1, 2, 3),
                         channels=32, mla_channels=8, num_classes=K, dropout_ratio=0,
                         norm_cfg=BN)),
    'detr_vit': lambda: _tiny_config('tiny_detr_shapes.py'),
    'deformable_detr_r18': lambda: _deformable(),
    'deformable_detr_refine_twostage_r18': lambda: _deformable(refine=True, two_stage=True),
}
SEG = [n for n in MODEL_CFGS if 'detr' not in n]
DET = [n for n in MODEL_CFGS if 'detr' in n]


def build(name, seed=0):
    """The model ``name`` with random weights (seeded), in eval mode; BN statistics are
    randomised so that the normalisation is not an identity."""
    torch.manual_seed(seed)
    cfg = MODEL_CFGS[name]()
    cfg.pop('data_preprocessor', None)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg)
    model.init_weights()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()
