"""Whole-detector DETR checkpoints (official repo, Hugging Face, MMDetection) -> densevit's
:class:`DETR`.

Layouts recognised from the keys:

- official (facebookresearch/detr, ``detr-r50-e632da11.pth`` ...):
  ``backbone.0.body.*`` (torchvision ResNet), ``transformer.encoder.layers.N.
  {self_attn.in_proj_*, self_attn.out_proj, linear1, linear2, norm1, norm2}``,
  ``transformer.decoder.layers.N.{self_attn, multihead_attn, linear1/2,
  norm1/2/3}``, ``transformer.decoder.norm``, ``input_proj``, ``query_embed``,
  ``class_embed``, ``bbox_embed.layers.N``. Same module types as densevit's
  (``nn.MultiheadAttention``), so only the names change.
- Hugging Face ``DetrForObjectDetection`` / ``DetrModel`` (Hub file layout and
  transformers-5 module layout): ``model.backbone.conv_encoder.model.*`` (a
  timm ResNet, whose names are torchvision's, or an HF ``ResNet``, converted
  by :func:`densevit.checkpoint.resnet.convert_hf_resnet_backbone`),
  ``model.{encoder,decoder}.layers.N.self_attn.{q,k,v}_proj`` (fused into
  ``in_proj_weight`` [3D, D] / ``in_proj_bias`` [3D], q-k-v order), ``out_proj`` / ``o_proj``,
  ``fc1/fc2`` (or ``mlp.fc1/fc2``), ``self_attn_layer_norm``, decoder
  ``encoder_attn`` (-> ``cross_attn``) and ``encoder_attn_layer_norm``,
  ``final_layer_norm``, ``model.decoder.layernorm``, ``model.input_projection``,
  ``model.query_position_embeddings``, ``class_labels_classifier``,
  ``bbox_predictor.layers.N``.

- MMDetection 3.x ``DETR`` (``configs/detr/detr_r50_8xb2-150e_coco.py``, saved by
  mmengine as ``{'meta', 'state_dict'}``); facts checked in mmdet 3.3.0 / mmcv 2.1.0:

  (``T`` = ``bbox_head.transformer``, ``L`` = ``encoder`` or ``decoder``)

  - ``backbone.{conv1,bn1,layer1-4}.*`` -> ``backbone.*`` (unchanged)
  - ``neck.convs.0.conv.{weight,bias}`` -> ``bbox_head.input_proj.*``
  - ``L.layers.N.self_attn.attn.*`` -> ``T.L.N.self_attn.*``;
    ``decoder.layers.N.cross_attn.attn.*`` -> ``T.decoder.N.cross_attn.*``
    (``in_proj_weight`` [3D, D], ``in_proj_bias``, ``out_proj``)
  - ``L.layers.N.ffn.layers.0.0`` / ``ffn.layers.1`` -> ``T.L.N.ffn.linear1`` / ``linear2``
  - ``L.layers.N.norms.{0,1,2}`` -> ``T.L.N.norm{1,2,3}``
  - ``decoder.post_norm`` -> ``T.decoder_norm``
  - ``query_embedding.weight`` [Q, D] -> ``bbox_head.query_embed.weight``
  - ``bbox_head.fc_cls`` [K+1, D] -> ``bbox_head.class_embed``
  - ``bbox_head.reg_ffn.layers.0.0`` / ``reg_ffn.layers.1`` / ``fc_reg`` [4, D] ->
    ``bbox_head.bbox_embed.layers.0`` / ``.1`` / ``.2``

  Every tensor is copied unchanged; the facts that make that right:

  - backbone (``mmdet/models/backbones/resnet.py``): mmdet's ResNet names its
    norms ``bn1..3`` (``build_norm_layer`` abbreviation + postfix) and its
    shortcut ``downsample.{0,1}``, i.e. torchvision's names; ``style='pytorch'``
    strides the 3x3 conv, as densevit's. Its ``num_batches_tracked`` buffers are
    dropped by densevit's ``FrozenBN`` on load.
  - input projection (``mmdet/models/necks/channel_mapper.py``): ``ChannelMapper``
    with one input, ``kernel_size=1``, ``norm_cfg=None``, ``act_cfg=None`` is a single
    ``ConvModule``, whose ``bias='auto'`` means a bias when there is no norm
    (``mmcv/cnn/bricks/conv_module.py``): a plain 1x1 conv with bias, as densevit's.
  - attention (``mmcv/cnn/bricks/transformer.py``): mmcv's ``MultiheadAttention``
    wraps ``nn.MultiheadAttention`` as ``.attn`` (fused q-k-v ``in_proj``), adds
    ``query_pos`` to the query and ``key_pos`` to the key (never the value) and adds
    the residual itself; mmcv's ``FFN`` (``num_fcs=2``) is ``layers.0`` =
    (Linear, ReLU, Dropout), ``layers.1`` = Linear, plus its own residual.
  - layer order (``mmdet/models/layers/transformer/detr_layers.py``): encoder
    self-attention (``key_pos = query_pos`` = the sine encoding), ``norms.0``, FFN,
    ``norms.1``; decoder self-attention, ``norms.0``, cross-attention (key: encoder
    memory + encoding), ``norms.1``, FFN, ``norms.2``: post-norm, as densevit.
    ``DetrTransformerDecoder`` applies ``post_norm`` to every layer's output
    (``return_intermediate=True``), as densevit's ``decoder_norm``.
  - queries (``mmdet/models/detectors/detr.py``): ``query_embedding`` is [Q, D], not
    split: it is the query position; the decoder input starts at zeros (densevit:
    ``tgt=None``). The sine encoding has no weights (``num_feats = D/2``,
    ``normalize=True``, scale 2 pi, eps 1e-6, offset 0, y then x: densevit's
    ``sine_2d`` defaults); the padding mask is each ``img_shape`` inside
    ``batch_input_shape``, resized to the feature grid by nearest neighbour, and
    left out when no image is padded (the same as an all-valid mask).
  - head (``mmdet/models/dense_heads/detr_head.py``): with ``use_sigmoid=False`` (the
    zoo configs) ``fc_cls`` has ``num_classes + 1`` outputs, the last one background,
    scored by softmax without it: densevit's convention. Boxes are
    ``fc_reg(ReLU(reg_ffn(h))).sigmoid()`` with ``reg_ffn`` = Linear, ReLU, Linear
    (``add_identity=False``): densevit's 3-layer box MLP. Prediction keeps the top
    ``test_cfg.max_per_img`` queries by score (densevit: ``DETRHead(num_dets=...)``).
    A sigmoid-classifier file (``fc_cls`` [K, D]) does not fit densevit's head and
    is refused as a shape mismatch.

Output keys are the detector's: ``backbone.*`` and ``bbox_head.*``. The class
count follows the checkpoint (COCO: 91 ids + no-object = 92 logits in the
official files, 80 + 1 in MMDetection's); build the head with the same
``num_classes`` to load it.
"""
from .layout import Layout, convert_state_dict, detector_layout
from .resnet import convert_hf_resnet_backbone

_T = 'bbox_head.transformer.'
_LEAF = r'(weight|bias)'

OFFICIAL = Layout(
    'official DETR', r'^transformer\.encoder\.layers\.\d+\.self_attn\.in_proj_weight$',
    [
        (r'backbone\.0\.body\.(.+)', r'backbone.\1'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.(.+)',
         _T + r'\1.\2.self_attn.\3'),
        (r'transformer\.decoder\.layers\.(\d+)\.multihead_attn\.(.+)',
         _T + r'decoder.\1.cross_attn.\2'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.linear(1|2)\.' + _LEAF,
         _T + r'\1.\2.ffn.linear\3.\4'),
        (r'transformer\.(encoder|decoder)\.layers\.(\d+)\.(norm[123])\.' + _LEAF,
         _T + r'\1.\2.\3.\4'),
        (r'transformer\.decoder\.norm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'(input_proj|class_embed)\.' + _LEAF, r'bbox_head.\1.\2'),
        (r'query_embed\.weight', 'bbox_head.query_embed.weight'),
        (r'bbox_embed\.layers\.(\d+)\.' + _LEAF, r'bbox_head.bbox_embed.layers.\1.\2'),
    ])

_M = r'(?:model\.)?'
_LAYER = _M + r'(encoder|decoder)\.layers\.(\d+)\.'
_PROJ_LEAF = {'weight': 'in_proj_weight', 'bias': 'in_proj_bias'}


def _in_proj(attn):
    def rename(m):
        return f'{_T}{m[1]}.{m[2]}.{attn}.{_PROJ_LEAF[m[4]]}@{m[3]}'
    return rename


HF = Layout(
    'Hugging Face DETR', r'(^|\.)encoder\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)\.',
    [
        # timm backbone (torchvision names) or HF ResNet: both under conv_encoder.model
        (_M + r'backbone\.(?:conv_encoder\.)?model\.(.+)', r'backbone.\1'),
        (_M + r'input_projection\.' + _LEAF, r'bbox_head.input_proj.\1'),
        (_M + r'query_position_embeddings\.weight', 'bbox_head.query_embed.weight'),
        (_LAYER + r'self_attn\.(q|k|v)_proj\.' + _LEAF, _in_proj('self_attn')),
        (_LAYER + r'encoder_attn\.(q|k|v)_proj\.' + _LEAF, _in_proj('cross_attn')),
        (_LAYER + r'self_attn\.(?:out_proj|o_proj)\.' + _LEAF, _T + r'\1.\2.self_attn.out_proj.\3'),
        (_LAYER + r'encoder_attn\.(?:out_proj|o_proj)\.' + _LEAF,
         _T + r'\1.\2.cross_attn.out_proj.\3'),
        (_LAYER + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'\1.\2.ffn.linear\3.\4'),
        (_LAYER + r'self_attn_layer_norm\.' + _LEAF, _T + r'\1.\2.norm1.\3'),
        (_M + r'decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.' + _LEAF,
         _T + r'decoder.\1.norm2.\2'),
        (_M + r'encoder\.layers\.(\d+)\.final_layer_norm\.' + _LEAF, _T + r'encoder.\1.norm2.\2'),
        (_M + r'decoder\.layers\.(\d+)\.final_layer_norm\.' + _LEAF, _T + r'decoder.\1.norm3.\2'),
        (_M + r'decoder\.layernorm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'class_labels_classifier\.' + _LEAF, r'bbox_head.class_embed.\1'),
        (r'bbox_predictor\.layers\.(\d+)\.' + _LEAF, r'bbox_head.bbox_embed.layers.\1.\2'),
    ])

_HF_ENC = _M + r'encoder\.layers\.(\d+)\.'


def hf_variant_rules():
    """Rename rules for what HF's DETR variants (Conditional DETR, DAB-DETR) keep of
    :data:`HF` DETR: ``(model.)backbone.(conv_encoder.)model.*`` -> ``backbone.*``,
    ``input_projection`` -> ``bbox_head.input_proj`` and DETR's encoder layers (``T`` =
    ``bbox_head.transformer.``): ``self_attn.{q,k,v}_proj`` fused into
    ``T.encoder.N.self_attn.in_proj_*``, ``self_attn.{out_proj,o_proj}`` -> ``out_proj``,
    ``(mlp.)fc1`` / ``fc2`` -> ``ffn.linear1`` / ``linear2``, ``self_attn_layer_norm`` /
    ``final_layer_norm`` -> ``norm1`` / ``norm2``; ``(model.)decoder.layernorm`` ->
    ``T.decoder_norm`` and ``bbox_predictor.layers.N`` -> ``bbox_head.bbox_embed.layers.N``.
    The query table, the decoder layers and the classifier are each variant's."""
    return [
        (_M + r'backbone\.(?:conv_encoder\.)?model\.(.+)', r'backbone.\1'),
        (_M + r'input_projection\.' + _LEAF, r'bbox_head.input_proj.\1'),
        (_HF_ENC + r'self_attn\.(q|k|v)_proj\.' + _LEAF,
         lambda m: f'{_T}encoder.{m[1]}.self_attn.{_PROJ_LEAF[m[3]]}@{m[2]}'),
        (_HF_ENC + r'self_attn\.(?:out_proj|o_proj)\.' + _LEAF,
         _T + r'encoder.\1.self_attn.out_proj.\2'),
        (_HF_ENC + r'(?:mlp\.)?fc(1|2)\.' + _LEAF, _T + r'encoder.\1.ffn.linear\2.\3'),
        (_HF_ENC + r'self_attn_layer_norm\.' + _LEAF, _T + r'encoder.\1.norm1.\2'),
        (_HF_ENC + r'final_layer_norm\.' + _LEAF, _T + r'encoder.\1.norm2.\2'),
        (_M + r'decoder\.layernorm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'bbox_predictor\.layers\.(\d)\.' + _LEAF, r'bbox_head.bbox_embed.layers.\1.\2'),
    ]


_MM_LAYER = r'(encoder|decoder)\.layers\.(\d+)\.'
_MM_ATTN = r'(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)'


def _mm_norm(m):
    return f'{_T}{m[1]}.{m[2]}.norm{int(m[3]) + 1}.{m[4]}'


# the decoder's cross-attention as an mmcv MultiheadAttention: DETR alone among
# mmdet's detectors (Deformable DETR / DINO: deformable attention; Conditional and
# DAB-DETR: their own attention modules)
MMDET = Layout(
    'MMDetection DETR', r'^decoder\.layers\.\d+\.cross_attn\.attn\.in_proj_weight$',
    [
        (r'(backbone\.(?:conv1|bn1|layer[1-4])\..+)', r'\1'),
        (r'neck\.convs\.0\.conv\.' + _LEAF, r'bbox_head.input_proj.\1'),
        (_MM_LAYER + r'(self_attn|cross_attn)\.attn\.' + _MM_ATTN, _T + r'\1.\2.\3.\4'),
        (_MM_LAYER + r'ffn\.layers\.0\.0\.' + _LEAF, _T + r'\1.\2.ffn.linear1.\3'),
        (_MM_LAYER + r'ffn\.layers\.1\.' + _LEAF, _T + r'\1.\2.ffn.linear2.\3'),
        (_MM_LAYER + r'norms\.([012])\.' + _LEAF, _mm_norm),
        (r'decoder\.post_norm\.' + _LEAF, _T + r'decoder_norm.\1'),
        (r'query_embedding\.weight', 'bbox_head.query_embed.weight'),
        (r'bbox_head\.fc_cls\.' + _LEAF, r'bbox_head.class_embed.\1'),
        (r'bbox_head\.reg_ffn\.layers\.0\.0\.' + _LEAF, r'bbox_head.bbox_embed.layers.0.\1'),
        (r'bbox_head\.reg_ffn\.layers\.1\.' + _LEAF, r'bbox_head.bbox_embed.layers.1.\1'),
        (r'bbox_head\.fc_reg\.' + _LEAF, r'bbox_head.bbox_embed.layers.2.\1'),
    ])

DENSEVIT = detector_layout('densevit DETR', r'^bbox_head\.transformer\.encoder\.\d+\.')


HF.post = convert_hf_resnet_backbone


def convert_detr(state_dict, strict=False):
    """Convert a whole DETR checkpoint's ``state_dict`` to densevit's ``DETR`` keys.

    Args:
        state_dict (dict): official / HF / MMDetection DETR (or densevit) tensors.
        strict (bool): raise on keys no rule explains (else kept, and reported
            as unexpected when loaded).

    Returns:
        OrderedDict with ``backbone.*`` and ``bbox_head.*`` keys.

    Raises:
        ValueError: the keys match no DETR layout (the first keys are listed).
    """
    return convert_state_dict(state_dict, [OFFICIAL, HF, MMDET, DENSEVIT], 'DETR', strict)


def model_layouts(state_dict):
    """Whole-model layouts of this family (see :mod:`densevit.checkpoint.model`)."""
    return [OFFICIAL, HF, MMDET]
