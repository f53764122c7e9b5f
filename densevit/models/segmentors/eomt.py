"""EoMT (Kerssies et al., CVPR 2025, "Your ViT is Secretly an Image Segmentation Model"): a
plain ViT whose last blocks process learned queries beside the patch tokens, read out by a
small mask module, with masked attention only while training."""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModel
from torch import nn

from densevit.models.backbones.vit import VisionTransformer
from densevit.models.backbones.vit_windows import uses_grid_layers
from densevit.models.layers.mask_upscale import official_num_upscale_blocks
from densevit.models.layers.rope_2d import Rotation
from densevit.models.size_groups import SizeGroupedPredict
from densevit.registry import MODELS
from densevit.utils.random_draws import UniformDraws

from .mask_classifier import TEST_CFG as MASK_TEST_CFG
from .mask_classifier import MaskClassifierPredict

TEST_CFG = dict(MASK_TEST_CFG, masked_attention=False)


def check_eomt_backbone(backbone, num_blocks):
    """Refuse, naming what was asked and what the backbone has, a backbone EoMT cannot join
    queries into (see :class:`EoMT`)."""
    name = type(backbone).__name__
    if not isinstance(backbone, VisionTransformer):
        raise TypeError(f'EoMT joins its queries into the blocks of a VisionTransformer; got '
                        f'{name}')
    depth = backbone.num_layers
    if not 1 <= num_blocks <= depth:
        raise ValueError(f'EoMT: num_blocks={num_blocks} asks to join the queries into '
                         f'{num_blocks} blocks, but the backbone {name} has {depth} layers '
                         f'(num_blocks must be 1..{depth})')
    if backbone.pos_embed_type == 'relative':
        raise ValueError("EoMT: the backbone's pos_embed type 'relative' is not supported: a "
                         'relative position bias has no entries for the query tokens (they '
                         "have no grid position); use an absolute table ('learned_1d', "
                         "'learned_2d', 'sincos_2d', any placement), 'rope' or 'none'")
    if uses_grid_layers(backbone):
        raise ValueError('EoMT: windowed attention, decomposed relative positions and residual '
                         'blocks (ViTDet / SAM options) work on the patch grid alone; the '
                         'query tokens cannot join such blocks')
    if backbone.norm is None:
        raise ValueError("EoMT predicts from the ViT's LayerNorm-ed tokens: the backbone needs "
                         'final_norm=True')


def with_query_rows(position, kind, num_queries):
    """A layer's position code for E + n tokens -> for Q + E + n: queries have no grid
    position, so a table gets zero rows and a rotation the identity (cos 1, sin 0) for
    them, in front."""
    if position is None:
        return None
    if kind == 'absolute':  # [1 or B, E + n, D]
        rows = position.new_zeros(position.shape[0], num_queries, position.shape[2])
        return torch.cat([rows, position], dim=1)
    if kind == 'rotary':  # cos / sin [1 or B, 1 or heads, E + n, d/2]
        shape = (*position.cos.shape[:2], num_queries, position.cos.shape[-1])
        return Rotation(torch.cat([position.cos.new_ones(shape), position.cos], dim=2),
                        torch.cat([position.sin.new_zeros(shape), position.sin], dim=2),
                        position.interleaved)
    raise ValueError(f'EoMT: no query rows for a {kind!r} position code')


@MODELS.register_module()
class EoMT(MaskClassifierPredict, SizeGroupedPredict, BaseModel):
    """Encoder-only Mask Transformer.

    The image goes through the ViT's stem and first L - N blocks as usual; then Q learned
    query tokens (``query_embed`` [Q, D]) are put in front of the token sequence
    ([queries, class token, registers, patches]) and the last N blocks (``num_blocks``)
    process them with the patch tokens, in the ViT's own self-attention. The mask module
    (``decode_head``, :class:`~densevit.models.heads.eomt_head.EoMTHead`) reads the
    LayerNorm-ed queries and patch tokens: class logits [B, Q, K+1] and mask logits
    [B, Q, h 2^u, w 2^u] (u upscalings of the patch grid).

    Masked attention (training): before each of the N blocks the mask module predicts from
    the current tokens; a query then attends only to the patch tokens where its predicted
    mask (bilinearly resized to the patch grid) is positive (it always sees the queries,
    the class and register tokens; patch tokens see everything). Each query is masked with
    the block's probability ``attn_mask_probs[b]`` (a fresh draw per image, query and
    block), which :class:`~densevit.engine.mask_annealing_hook.MaskAnnealingHook` anneals
    from 1 to 0 during training (poly, power 0.9, the blocks staggered, as the official
    trainer: :mod:`~densevit.models.segmentors.mask_annealing`). Each of these N
    intermediate predictions and the final one gets the mask-classification loss (deep
    supervision). At inference there is no masking and only the final prediction is made
    (``test_cfg.masked_attention=True`` masks with the probabilities as the official code
    and Hugging Face's model do in evaluation; for a trained model they are 0).

    Position embeddings: the queries have no grid position. Absolute tables
    (``learned_1d``, ``learned_2d``, ``sincos_2d``) at the stem are added before the queries
    join; at ``every_layer`` / ``every_layer_shared`` the queries get zero rows (as
    registers do); ``rope`` leaves the queries unrotated (as the class and register
    tokens), so their attention to patches depends on content only; ``none`` is fine.
    ``relative`` (a bias table with entries for the class token and the grid only) and
    ViTDet's windowed / decomposed / residual options are refused when built.

    Args:
        backbone (dict): a ``VisionTransformer`` with ``final_norm=True`` (EoMT's: DINOv2
            style, with registers and LayerScale).
        decode_head (dict): an ``EoMTHead`` config with ``num_classes``; ``in_channels``
            (the ViT's width) and ``num_upscale_blocks`` (the official rule on the patch
            stride, :func:`~densevit.models.layers.mask_upscale.official_num_upscale_blocks`)
            are filled in when left out.
        num_queries (int): Q (ADE20K semantic: 100; COCO panoptic: 200).
        num_blocks (int): N, the last blocks with queries (1..the ViT's depth; EoMT: 4).
        num_things_classes (int, optional): panoptic / instance data: the classes below it
            are things, the others stuff (targets from ``gt_instances`` and the stuff of
            ``gt_sem_seg``; the panoptic and instance outputs).
        ignore_index (int): label of unlabelled pixels in ``gt_sem_seg``.
        train_cfg (dict, optional): unused.
        test_cfg (dict): ``mode`` ``'whole'`` or ``'slide'`` (with ``crop_size``, ``stride``,
            ``batch_windows``: semantic only, window scores averaged); which outputs:
            ``semantic_on`` (True), ``panoptic_on``, ``instance_on`` (False; need
            ``num_things_classes``, panoptic also ``'whole'``); ``object_threshold``,
            ``overlap_threshold`` (0.8, 0.8: panoptic), ``max_per_image`` (100: instance);
            ``masked_attention`` (False).
        data_preprocessor (dict): usually ``SegDataPreprocessor``.

    Attributes:
        attn_mask_probs (Tensor): buffer [N], each block's masking probability (1 when
            built; saved with the model).
        draws: the source of the random numbers (per-query masking, sampled points),
            :class:`~densevit.utils.random_draws.UniformDraws`; a test may give its own.

    Outputs:
        ``mode='loss'``: per prediction set ``loss_cls``, ``loss_mask``, ``loss_dice`` (the
        final), ``b{i}.loss_*`` (the one before the i-th block with queries, i = 0..N-1).
        ``mode='predict'``: at each image's ``ori_shape``, ``seg_logits`` [K, H, W] (the
        per-class scores of :func:`~.mask_postprocess.semantic_scores`, not logits) and
        ``pred_sem_seg`` [1, H, W]; ``pred_panoptic_seg.sem_seg`` [1, H, W] (``label +
        instance * 1000``, VOID = K); ``pred_instances`` (``masks``, ``labels``, ``scores``,
        ``bboxes``). ``mode='tensor'``: dict of ``mask_logits`` and ``class_logits``, tuples
        of the prediction sets made (intermediate ones first, the final last).
    """

    TEST_CFG = TEST_CFG

    def __init__(self, backbone, decode_head, num_queries=100, num_blocks=4,
                 num_things_classes=None, ignore_index=255, train_cfg=None, test_cfg=None,
                 data_preprocessor=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = MODELS.build(backbone)
        check_eomt_backbone(self.backbone, num_blocks)
        D = self.backbone.embed_dims
        head = dict(decode_head)
        head.setdefault('in_channels', D)
        head.setdefault('num_upscale_blocks',
                        official_num_upscale_blocks(self.backbone.out_strides[0]))
        if head['in_channels'] != D:
            raise ValueError(f"EoMT: decode_head.in_channels={head['in_channels']} but the "
                             f'backbone is {D} wide')
        self.decode_head = MODELS.build(head)
        self.num_classes = self.decode_head.num_classes
        self.num_queries = num_queries
        self.num_blocks = num_blocks
        self.num_things_classes = num_things_classes
        self.ignore_index = ignore_index
        self.query_embed = nn.Embedding(num_queries, D)
        self.register_buffer('attn_mask_probs', torch.ones(num_blocks))
        self.draws = UniformDraws()
        self.train_cfg = train_cfg
        self.test_cfg = {**TEST_CFG, **(test_cfg or {})}
        self._check_test_cfg()

    # ------------------------------------------------------------------ forward

    def predictions(self, inputs, masked):
        """inputs [B, C, H, W] -> (mask logits, class logits): tuples of [B, Q, h', w'] and
        [B, Q, K+1], one per prediction set made: before each of the N blocks with queries
        when ``masked`` (the masked attention needs them), then the final one."""
        vit = self.backbone
        tokens, hw = vit.embed(inputs)
        x = vit.stem_sequence(tokens, hw)
        shared = vit.shared_position(hw, None, x)
        Q, E = self.num_queries, vit.num_extra_tokens
        first = vit.num_layers - self.num_blocks
        masks, classes = [], []
        for i in range(vit.num_layers):
            if i == first:
                queries = self.query_embed.weight.to(x.dtype)
                x = torch.cat([queries.expand(x.shape[0], -1, -1), x], dim=1)
            position = vit._layer_position(i, hw, shared, None, x)
            attn_mask = None
            if i >= first:
                position = with_query_rows(position, vit.pos_embed_kind, Q)
                if masked:
                    mask_logits, class_logits = self.decode_head(vit.norm(x), hw, Q, E)
                    masks.append(mask_logits)
                    classes.append(class_logits)
                    attn_mask = self.attention_mask(mask_logits, hw, i - first, x.shape[1])
            x = vit.run_block(i, x, hw, position, attn_mask)
        mask_logits, class_logits = self.decode_head(x, hw, Q, E)  # x: after the final norm
        return tuple(masks) + (mask_logits,), tuple(classes) + (class_logits,)

    def attention_mask(self, mask_logits, hw, block, num_tokens):
        """Block ``block``'s (0..N-1) masked attention from the mask logits [B, Q, h', w']
        predicted before it: bool [B, 1, T, T] for T = ``num_tokens`` (True: may attend),
        query q kept off the patch tokens where its mask, resized to the grid ``hw``, is not
        positive; each query masked with probability ``attn_mask_probs[block]`` (draw
        ``'query_unmask'`` [B, Q]: unmasked where it exceeds the probability). None when the
        probability is 0."""
        prob = self.attn_mask_probs[block]
        if prob <= 0:
            return None
        B, Q = mask_logits.shape[:2]
        on = F.interpolate(mask_logits, size=hw, mode='bilinear', align_corners=False)
        on = on.flatten(2) > 0  # [B, Q, h*w]
        if prob < 1:
            unmasked = self.draws('query_unmask', (B, Q), mask_logits.device, prob.dtype) > prob
            on = on | unmasked[..., None]
        mask = on.new_ones(B, num_tokens, num_tokens)
        mask[:, :Q, num_tokens - on.shape[-1]:] = on
        return mask[:, None]

    def prediction_sets(self, inputs):
        """The prediction sets of ``mode='tensor'`` and ``predict``: :meth:`predictions`, masked
        in training or with ``test_cfg.masked_attention``."""
        return self.predictions(inputs, self._masked())

    def _masked(self):
        return self.training or bool(self.test_cfg['masked_attention'])

    # ------------------------------------------------------------------ training

    def loss(self, inputs, data_samples):
        """The mask-classification loss of every prediction set (deep supervision), against
        targets from ``gt_panoptic_seg``, ``gt_instances`` or ``gt_sem_seg``
        (:func:`~.mask_targets.mask_targets`)."""
        masks, classes = self.predictions(inputs, masked=True)
        return self.set_losses(masks, classes, inputs, data_samples, prefix='b')
