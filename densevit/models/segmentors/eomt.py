"""EoMT (Kerssies et al., CVPR 2025, "Your ViT is Secretly an Image Segmentation Model"): a
plain ViT whose last blocks process learned queries beside the patch tokens, read out by a
small mask module, with masked attention only while training."""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModel
from mmengine.structures import InstanceData, PixelData
from torch import nn

from densevit.models.backbones.vit import VisionTransformer
from densevit.models.backbones.vit_windows import uses_grid_layers
from densevit.models.heads.decode_head import class_argmax
from densevit.models.layers.mask_upscale import official_num_upscale_blocks
from densevit.models.layers.rope_2d import Rotation
from densevit.models.losses.set_criterion import num_boxes_across_ranks
from densevit.models.size_groups import SizeGroupedPredict
from densevit.registry import MODELS
from densevit.structures import DataSample
from densevit.utils.precision import run_in_fp32
from densevit.utils.random_draws import UniformDraws

from .encoder_decoder import restore_to_original
from .mask_postprocess import instance_segmentation, panoptic_segmentation, semantic_scores
from .mask_targets import mask_targets
from .sliding_window import slide_logits

TEST_CFG = dict(mode='whole', semantic_on=True, panoptic_on=False, instance_on=False,
                object_threshold=0.8, overlap_threshold=0.8, max_per_image=100,
                masked_attention=False)


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


def batch_semantic_scores(masks, classes, size):
    """masks [B, Q, h, w] resized bilinearly to ``size``, classes [B, Q, K+1] -> per-class
    scores [B, K, H, W] (:func:`~.mask_postprocess.semantic_scores`)."""
    masks = F.interpolate(masks, size=size, mode='bilinear', align_corners=False)
    return torch.stack([semantic_scores(m, c) for m, c in zip(masks, classes, strict=True)])


@MODELS.register_module()
class EoMT(SizeGroupedPredict, BaseModel):
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

    def _check_test_cfg(self):
        cfg = self.test_cfg
        unknown = sorted(set(cfg) - set(TEST_CFG) - {'crop_size', 'stride', 'batch_windows'})
        if unknown:
            raise ValueError(f'EoMT: unknown test_cfg key(s) {unknown}; known: '
                             f"{sorted(TEST_CFG) + ['batch_windows', 'crop_size', 'stride']}")
        if cfg['mode'] not in ('whole', 'slide'):
            raise ValueError(f"EoMT: test_cfg.mode must be 'whole' or 'slide', got "
                             f"{cfg['mode']!r}")
        wanted = [k for k in ('panoptic_on', 'instance_on') if cfg[k]]
        if wanted and self.num_things_classes is None:
            raise ValueError(f'EoMT: test_cfg.{wanted[0]} needs num_things_classes (the thing '
                             f'classes come first)')
        if cfg['mode'] == 'slide':
            missing = [k for k in ('crop_size', 'stride') if k not in cfg]
            if missing:
                raise ValueError(f'EoMT: slide inference needs test_cfg.{missing[0]} (h, w)')
            if wanted or not cfg['semantic_on']:
                raise ValueError("EoMT: slide inference gives semantic segmentation only "
                                 "(test_cfg.semantic_on); panoptic / instance need mode='whole'")

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

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples; 'tensor' -> dict of
        ``mask_logits`` and ``class_logits`` (see the class docstring)."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        if mode == 'tensor':
            masks, classes = self.predictions(inputs, self._masked())
            return dict(mask_logits=masks, class_logits=classes)
        raise ValueError(f"EoMT.forward: mode must be 'loss', 'predict' or 'tensor', got "
                         f'{mode!r}')

    def _masked(self):
        return self.training or bool(self.test_cfg['masked_attention'])

    # ------------------------------------------------------------------ training

    def loss(self, inputs, data_samples):
        """The mask-classification loss of every prediction set (deep supervision), against
        targets from ``gt_panoptic_seg``, ``gt_instances`` or ``gt_sem_seg``
        (:func:`~.mask_targets.mask_targets`)."""
        masks, classes = self.predictions(inputs, masked=True)
        targets = mask_targets(data_samples, inputs.shape[-2:], inputs.device, self.num_classes,
                               self.ignore_index, self.num_things_classes)
        num_masks = num_boxes_across_ranks(targets, inputs.device)
        criterion = self.decode_head.criterion
        losses = {}
        for b, (mask_logits, class_logits) in enumerate(zip(masks, classes, strict=True)):
            tag = '' if b == len(masks) - 1 else f'b{b}.'
            out = criterion(mask_logits, class_logits, targets, num_masks, self.draws)
            losses.update({tag + k: v for k, v in out.items()})
        return losses

    # ------------------------------------------------------------------ inference

    def predict(self, inputs, data_samples=None):
        """The outputs ``test_cfg`` asks for, per image at its ``ori_shape`` (the batch
        padding cut, a flip undone, resized bilinearly); see the class docstring."""
        if data_samples is None:
            shape = tuple(inputs.shape[-2:])
            data_samples = [DataSample(metainfo=dict(img_shape=shape, ori_shape=shape))
                            for _ in range(len(inputs))]
        if self.test_cfg['mode'] == 'slide':
            return self._predict_slide(inputs, data_samples)
        masks, classes = self.predictions(inputs, self._masked())
        return self.postprocess(masks[-1], classes[-1], data_samples, tuple(inputs.shape[-2:]))

    def postprocess(self, mask_logits, class_logits, data_samples, size):
        """The final prediction set -- mask logits [B, Q, h, w], class logits [B, Q, K+1],
        from PyTorch or an exported graph -- into each data sample's outputs; ``size`` is the
        padded input's (H, W). Resized and post-processed in float32 at least, autocast off
        (bf16 inference). Returns ``data_samples``."""
        run_in_fp32(self._postprocess_batch, mask_logits, class_logits, data_samples, size)
        return data_samples

    def _postprocess_batch(self, masks, classes, data_samples, size):
        """masks [B, Q, h, w] (resized to the padded input's ``size``), classes [B, Q, K+1]
        -> each data sample's outputs."""
        masks = F.interpolate(masks, size=size, mode='bilinear', align_corners=False)
        for ds, mask_logits, class_logits in zip(data_samples, masks, classes, strict=True):
            self._postprocess(ds, restore_to_original(mask_logits, ds.metainfo), class_logits)

    def _postprocess(self, ds, mask_logits, class_logits):
        """One image's outputs from its mask logits [Q, H, W] (original size) and class
        logits [Q, K+1]."""
        cfg = self.test_cfg
        if cfg['semantic_on']:
            self._set_semantic(ds, semantic_scores(mask_logits, class_logits))
        if cfg['panoptic_on']:
            ids = panoptic_segmentation(mask_logits, class_logits, self.num_things_classes,
                                        cfg['object_threshold'], cfg['overlap_threshold'])
            ds.pred_panoptic_seg = PixelData(sem_seg=ids[None])
        if cfg['instance_on']:
            ds.pred_instances = InstanceData(**instance_segmentation(
                mask_logits, class_logits, cfg['max_per_image'], self.num_things_classes))

    @staticmethod
    def _set_semantic(ds, scores):
        ds.seg_logits = PixelData(data=scores)
        ds.pred_sem_seg = PixelData(data=class_argmax(scores, 0)[None])

    def _predict_slide(self, inputs, data_samples):
        """Semantic scores of overlapping windows, averaged per pixel."""
        def window_scores(crops):
            masks, classes = self.predictions(crops, self._masked())
            return run_in_fp32(batch_semantic_scores, masks[-1], classes[-1],
                               tuple(crops.shape[-2:]))
        cfg = self.test_cfg
        scores = slide_logits(window_scores, inputs, tuple(cfg['crop_size']),
                              tuple(cfg['stride']), cfg.get('batch_windows', 1))
        for ds, s in zip(data_samples, scores, strict=True):
            self._set_semantic(ds, restore_to_original(s, ds.metainfo))
        return data_samples
