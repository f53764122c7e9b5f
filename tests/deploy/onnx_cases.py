"""The models whose ONNX export is proven (tests/deploy), by name: a covering design of the
"Backbone x head" matrix (docs/architecture.md, tests/integration/test_backbone_head_matrix.py).

One export per backbone of the matrix, each with ONE head, and every head (SETR Naive / PUP /
MLA, SegFormer, DETR, Deformable DETR plain / with box refinement / refinement + two-stage,
DINO, Plain-DETR, Conditional DETR, DAB-DETR, EoMT's and Mask2Former's mask classification)
and the simple feature pyramid on at least one backbone: not the full product, which would
take an export per cell (the export, tracing with symbolic sizes, is what these tests spend
their time on). ``ROWS`` names each row's (matrix backbone, head):

============================================  ==================================  ==================
row                                           backbone                            head
============================================  ==================================  ==================
segformer_mit                                 Mix Transformer                     SegFormer
detr_vit                                      ViT, learned 1D PE                  DETR
setr_pup_vit_pe_none                          ViT, no PE                          SETR PUP
setr_pup_vit_rope                             ViT, RoPE-Mixed (EVA-02)            SETR PUP
setr_mla_vit_learned_2d                       ViT, learned 2D PE every layer      SETR MLA
segformer_sfp_vit_sincos_2d                   ViT, sin-cos PE every layer shared  SFP + SegFormer
setr_pup_swin                                 Swin, shift decided by size         SETR PUP
setr_naive_resnet50                           ResNet-50                           SETR Naive
deformable_detr_hybrid                        hybrid ResNet + ViT (2 levels)      Deformable DETR
deformable_detr_vit_sfp                       ViT + SFP (detection quickstart)    Deformable DETR,
                                                                                  box refinement
deformable_detr_refine_twostage_vit_relative  ViT, relative bias every layer      Deformable DETR,
                                                                                  refine + two-stage
dino_resnet50                                 ResNet-50                           DINO
plain_detr_vit                                ViT, learned 1D PE, no class token  Plain-DETR (BoxRPB,
                                                                                  two-stage)
conditional_detr_resnet50                     ResNet-50                           Conditional DETR
dab_detr_swin                                 Swin, shift decided by size         DAB-DETR
eomt_vit                                      ViT, registers, layer scale         EoMT
mask2former_vit_sfp                           ViT + SFP (the Mask2Former recipe)  Mask2Former
============================================  ==================================  ==================

``segformer_mit`` and ``detr_vit`` are the tiny trained checkpoints of the session
(``tiny_checkpoints.py``) as ``tools/deploy/export_onnx.py`` exports them (``conftest.py``);
the others have random weights, tiny widths and few layers (an export's cost grows with the
number of ops in the graph, not with their width).
"""
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

from tiny_run import REPO

K = 3
BN = dict(type='BN')
VIT = dict(type='VisionTransformer', img_size=64, patch_size=8, with_cls_token=True,
           arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
           drop_path_rate=0.0)
# The matrix's Swin with a second, shifted-window block in stages 0 and 2, and the shift of
# Swin's classifiers (always_shift=False: no shift in a map no larger than the window), so
# the graph must decide by the input's size: 5 x 5 windows, stage 2 shifts its 6 x 6 map at
# 96 x 96 but not its 5 x 7 / 7 x 5 ones at 80 x 112 / 112 x 72; stage 0 always shifts, with
# its map padded to whole windows at 96 x 96 and 112 x 72.
SWIN = dict(type='SwinTransformer', window_size=5, always_shift=False, drop_path_rate=0.0,
            arch=dict(embed_dims=16, depths=(2, 1, 2, 1), num_heads=(1, 1, 2, 2)))
RESNET50 = dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                out_indices=(0, 1, 2, 3), norm_cfg=BN)
HYBRID = dict(type='VisionTransformer', img_size=64, patch_size=1, with_cls_token=False,
              stem=dict(RESNET50, out_indices=(2,)),
              arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64))
DETR_TRANSFORMER = dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
                        feedforward_channels=32)
DEFORMABLE_TRANSFORMER = dict(num_heads=2, num_points=2, num_encoder_layers=1,
                              feedforward_channels=32, dropout=0.0)


def _vit(pos_embed, **kwargs):
    return dict(VIT, pos_embed=pos_embed, **kwargs)


def _setr_up(backbone, kind, in_channels=32):
    naive = kind == 'naive'
    return dict(type='EncoderDecoder', backbone=backbone, decode_head=dict(
        type='SETRUPHead', in_channels=in_channels, channels=16, in_index=-1, num_classes=K,
        dropout_ratio=0, norm_cfg=BN, num_convs=1 if naive else 2, up_scale=4 if naive else 2,
        kernel_size=1 if naive else 3))


def _setr_mla(backbone):
    return dict(
        type='EncoderDecoder',
        backbone=dict(backbone, out_indices=(0, 1, 2, 3), with_cls_token=False,
                      arch=dict(VIT['arch'], num_layers=4)),
        neck=dict(type='MLANeck', in_channels=[32] * 4, out_channels=16, norm_cfg=BN,
                  act_cfg=dict(type='ReLU')),
        decode_head=dict(type='SETRMLAHead', in_channels=(16,) * 4, in_index=(0, 1, 2, 3),
                         channels=32, mla_channels=8, num_classes=K, dropout_ratio=0,
                         norm_cfg=BN))


def _segformer_sfp(backbone):
    return dict(type='EncoderDecoder', backbone=backbone,
                neck=dict(type='SimpleFeaturePyramid', in_channels=32, out_channels=16,
                          in_stride=8),
                decode_head=dict(type='SegformerHead', in_channels=[16] * 4,
                                 in_index=[0, 1, 2, 3], channels=16, num_classes=K,
                                 norm_cfg=BN))


def _deformable_head(levels, refine=False, two_stage=False, decoder_layers=2):
    return dict(type='DeformableDETRHead', num_classes=K, embed_dims=32, num_queries=6,
                num_feature_levels=levels, with_box_refine=refine, as_two_stage=two_stage,
                num_dets=10, transformer=dict(DEFORMABLE_TRANSFORMER,
                                              num_decoder_layers=decoder_layers))


def _quickstart_deformable():
    """configs/quickstart/deformable_detr_vit_shapes.py (ViT, SimpleFeaturePyramid at scales
    1 and 0.5, a third level from the head, box refinement) at tiny widths."""
    cfg = _config('configs/quickstart/deformable_detr_vit_shapes.py')
    cfg['backbone'].update(arch=VIT['arch'], img_size=64)
    cfg['neck'].update(in_channels=32, out_channels=32)
    head = _deformable_head(cfg['bbox_head']['num_feature_levels'],
                            refine=cfg['bbox_head']['with_box_refine'])
    cfg['bbox_head'] = dict(cfg['bbox_head'], **head)
    return cfg


def _quickstart_mask2former():
    """configs/mask2former/mask2former_vit_shapes_panoptic.py (ViT, SimpleFeaturePyramid at
    strides 4 to 32, deformable pixel decoder, masked-attention decoder) at tiny widths: one
    encoder layer, three decoder layers (one round over the three levels, each masked by the
    prediction before it), 6 queries, 2 thing classes and 1 stuff; thresholds that random
    weights pass, so that the panoptic map has segments."""
    cfg = _config('configs/mask2former/mask2former_vit_shapes_panoptic.py')
    cfg['backbone'].update(arch=VIT['arch'], img_size=64)
    cfg['neck'].update(in_channels=32, out_channels=32)
    cfg['pixel_decoder'].update(feat_channels=32, out_channels=16, num_encoder_layers=1,
                                num_heads=2, num_points=2, feedforward_channels=32,
                                norm_cfg=dict(type='GN', num_groups=8))
    cfg['decode_head'].update(num_classes=K, num_queries=6, embed_dims=32, num_layers=3,
                              num_heads=2, feedforward_channels=32)
    cfg['test_cfg'].update(object_threshold=0.2, overlap_threshold=0.2)
    return dict(cfg, num_things_classes=2)


def _conditional_head(head_type):
    """Conditional DETR / DAB-DETR with two decoder layers (the second takes the first's
    output through ``query_scale``; DAB-DETR's refines the anchors between them), their
    Linear layers drawn from N(0, 0.2): the heads zero their box predictor's last layer,
    which would make DAB-DETR's anchor refinement an identity in the graph."""
    return dict(type=head_type, num_classes=K, embed_dims=32, num_queries=6, num_dets=10,
                transformer=DETR_TRANSFORMER,
                init_cfg=dict(type='Normal', layer='Linear', std=0.2))


def _config(path):
    return Config.fromfile(str(REPO / path)).model.to_dict()


MODEL_CFGS = {
    'segformer_mit': lambda: _config('tests/configs/tiny_segformer_shapes.py'),
    'detr_vit': lambda: _config('tests/configs/tiny_detr_shapes.py'),
    'setr_pup_vit_pe_none': lambda: _setr_up(_vit(dict(type='none')), 'pup'),
    # learned per-head frequencies, interleaved pairs, coordinates rescaled to the 8 x 8
    # pre-training grid: every size of the test is another grid
    'setr_pup_vit_rope': lambda: _setr_up(
        _vit(dict(type='rope', placement='every_layer', convention='eva02', mixed=True)),
        'pup'),
    'setr_mla_vit_learned_2d': lambda: _setr_mla(
        _vit(dict(type='learned_2d', placement='every_layer'))),
    'segformer_sfp_vit_sincos_2d': lambda: _segformer_sfp(
        _vit(dict(type='sincos_2d', placement='every_layer_shared'))),
    'setr_pup_swin': lambda: _setr_up(dict(SWIN, out_indices=(3,)), 'pup', 128),
    'setr_naive_resnet50': lambda: _setr_up(dict(RESNET50, out_indices=(3,)), 'naive', 256),
    # one decoder layer where a second adds no code path (it does with box refinement
    # alone: 2-d reference points become boxes for the second layer)
    'deformable_detr_hybrid': lambda: dict(type='DeformableDETR', backbone=HYBRID,
                                           bbox_head=_deformable_head(2, decoder_layers=1)),
    'deformable_detr_vit_sfp': _quickstart_deformable,
    'deformable_detr_refine_twostage_vit_relative': lambda: dict(
        type='DeformableDETR', backbone=_vit(dict(type='relative', placement='every_layer')),
        bbox_head=_deformable_head(2, refine=True, two_stage=True, decoder_layers=1)),
    # DINO: two-stage by the best class, per-layer positional queries from the boxes
    'dino_resnet50': lambda: dict(
        type='DeformableDETR', backbone=dict(RESNET50, out_indices=(1, 2, 3)),
        bbox_head=dict(type='DINOHead', num_classes=K, embed_dims=32, num_queries=6,
                       num_feature_levels=4, num_dets=10,
                       transformer=dict(DEFORMABLE_TRANSFORMER, num_decoder_layers=2))),
    'plain_detr_vit': lambda: dict(
        type='DETR', backbone=dict(VIT, with_cls_token=False),
        bbox_head=dict(type='PlainDETRHead', num_classes=K, embed_dims=32, num_queries=6,
                       num_heads=2, num_decoder_layers=2, feedforward_channels=32,
                       box_rpb=dict(hidden_dims=16, stride=8), num_dets=10)),
    'conditional_detr_resnet50': lambda: dict(
        type='DETR', backbone=dict(RESNET50, out_indices=(3,)),
        bbox_head=_conditional_head('ConditionalDETRHead')),
    'dab_detr_swin': lambda: dict(type='DETR', backbone=dict(SWIN, out_indices=(3,)),
                                  bbox_head=_conditional_head('DABDETRHead')),
    # EoMT's DINOv2-style ViT (registers, layer scale large enough to matter), queries in
    # the last of 2 blocks, all three outputs (2 thing classes, 1 stuff; thresholds that
    # random weights pass, so that the panoptic map has segments)
    'eomt_vit': lambda: dict(
        type='EoMT', num_queries=6, num_blocks=1, num_things_classes=2,
        backbone=dict(VIT, num_register_tokens=2, layer_scale_init_value=0.5),
        decode_head=dict(type='EoMTHead', num_classes=K),
        test_cfg=dict(panoptic_on=True, instance_on=True, object_threshold=0.2,
                      overlap_threshold=0.5)),
    'mask2former_vit_sfp': _quickstart_mask2former,
}
#: name -> (backbone as tests/integration/test_backbone_head_matrix.py names it, head)
ROWS = {
    'segformer_mit': ('mit', 'segformer'),
    'detr_vit': ('vit', 'detr'),
    'setr_pup_vit_pe_none': ('vit-pe-none', 'pup'),
    'setr_pup_vit_rope': ('vit-pe-rope-every_layer', 'pup'),
    'setr_mla_vit_learned_2d': ('vit-pe-learned_2d-every_layer', 'mla'),
    'segformer_sfp_vit_sincos_2d': ('vit-pe-sincos_2d-every_layer_shared', 'segformer'),
    'setr_pup_swin': ('swin', 'pup'),
    'setr_naive_resnet50': ('resnet50', 'naive'),
    'deformable_detr_hybrid': ('hybrid', 'deformable_detr'),
    'deformable_detr_vit_sfp': ('vit', 'deformable_detr (refine)'),
    'deformable_detr_refine_twostage_vit_relative': (
        'vit-pe-relative-every_layer', 'deformable_detr (refine, two-stage)'),
    'dino_resnet50': ('resnet50', 'dino'),
    'plain_detr_vit': ('vit', 'plain_detr'),
    'conditional_detr_resnet50': ('resnet50', 'conditional_detr'),
    'dab_detr_swin': ('swin', 'dab_detr'),
    'eomt_vit': ('vit (registers, layer scale)', 'eomt'),
    'mask2former_vit_sfp': ('vit', 'mask2former'),
}
DET = [n for n in MODEL_CFGS if 'detr' in n or 'dino' in n]
MASK = ['eomt_vit', 'mask2former_vit_sfp']
SEG = [n for n in MODEL_CFGS if n not in DET + MASK]
#: rows whose model is a tiny trained checkpoint of the session: name -> its kind
TRAINED = {'segformer_mit': 'seg', 'detr_vit': 'det'}


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


def renamed_input(src, dst, name='image'):
    """The ONNX file ``src`` saved to ``dst`` with its first input renamed to ``name``."""
    import onnx

    proto = onnx.load(str(src))
    old = proto.graph.input[0].name
    proto.graph.input[0].name = name
    for node in proto.graph.node:
        node.input[:] = [name if i == old else i for i in node.input]
    onnx.save(proto, str(dst))
    return dst


def old_opset(src, dst, version):
    """The ONNX file ``src`` saved to ``dst`` stamped with (default-domain) opset ``version``."""
    import onnx

    proto = onnx.load(str(src))
    for o in proto.opset_import:
        if o.domain in ('', 'ai.onnx'):
            o.version = version
    onnx.save(proto, str(dst))
    return dst
