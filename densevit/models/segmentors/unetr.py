"""UNETR (Hatamizadeh et al. 2022, "UNETR: Transformers for 3D Medical Image
Segmentation"), 2-D: a ViT encoder whose hidden states and the image feed a convolutional
decoder."""
from densevit.models.heads.unetr_head import HIDDEN_STATES, PATCH_STRIDE
from densevit.models.segmentors.encoder_decoder import EncoderDecoder
from densevit.registry import MODELS


def check_unetr_backbone(backbone, head):
    """Refuse, naming what it got, a backbone that does not give UNETR's decoder four maps of
    one patch grid of stride 16 (the ViT's hidden states), or maps of another width than
    ``head.in_channels``."""
    name = type(backbone).__name__
    channels = list(getattr(backbone, 'out_channels', None) or [])
    strides = list(getattr(backbone, 'out_strides', None) or [])
    layers = getattr(backbone, 'out_indices', None)
    got = (f'{name} with out_indices {list(layers)}: {len(channels)} map(s)'
           if layers is not None else f'{name} returning {len(channels)} map(s)')
    need = (f'UNETR needs a ViT backbone with {PATCH_STRIDE}-pixel patches returning '
            f'{HIDDEN_STATES} hidden states (out_indices of {HIDDEN_STATES} layers; MONAI\'s: '
            f'(3, 6, 9, 11) of 12)')
    if len(channels) != HIDDEN_STATES:
        raise ValueError(f'{need}; got {got}')
    if strides != [PATCH_STRIDE] * HIDDEN_STATES:
        raise ValueError(f'{need}: all maps of one grid of stride {PATCH_STRIDE}; got {name} '
                         f'with strides {strides or "unknown (no out_strides)"}')
    width = getattr(head, 'in_channels', None)
    width = width[0] if isinstance(width, list) else width
    if width is not None and set(channels) != {width}:
        raise ValueError(f'UNETR: decode_head.in_channels is {width} but the backbone '
                         f'{name} returns maps of {channels} channels')


@MODELS.register_module()
class UNETR(EncoderDecoder):
    """UNETR: an :class:`EncoderDecoder` whose decode head (usually
    :class:`~densevit.models.heads.unetr_head.UNETRHead`) reads the image as well as the ViT.

    :meth:`extract_feat` returns ``(image, *backbone maps)``: index 0 is the (normalised,
    padded) input image [B, C, H, W], indices 1-4 the four hidden states [B, D, H/16, W/16];
    auxiliary heads see the same tuple (``in_index`` counts the image). Loss, prediction
    and sliding-window inference are ``EncoderDecoder``'s.

    The backbone is checked when the model is built (:func:`check_unetr_backbone`): four
    maps, all of the stride-16 patch grid, as wide as the head's ``in_channels``; no neck.
    Images must be multiples of 16 (``SegDataPreprocessor(size_divisor=16)``).

    Args:
        backbone (dict): usually a ``VisionTransformer`` with ``patch_size=16``,
            ``with_cls_token=False`` and four ``out_indices``; MONAI's UNETR is
            ``num_layers=12, out_indices=(3, 6, 9, 11), qkv_bias=False,
            layer_norm_eps=1e-5`` (final norm on the last output only).
        decode_head (dict): e.g. ``dict(type='UNETRHead', in_channels=D, channels=16,
            num_classes=K)``.
        **kwargs: ``EncoderDecoder``'s other arguments (``auxiliary_head``, ``test_cfg``,
            ``data_preprocessor`` ...).
    """

    def __init__(self, backbone, decode_head, neck=None, **kwargs):
        if neck is not None:
            raise ValueError("UNETR's decoder reads the ViT's hidden states themselves: "
                             f"no neck (got {neck.get('type', neck)!r})")
        super().__init__(backbone, decode_head, **kwargs)
        check_unetr_backbone(self.backbone, self.decode_head)

    def extract_feat(self, inputs):
        """[B, C, H, W] -> (image [B, C, H, W], 4 x [B, D, H/16, W/16])."""
        return (inputs, *self.backbone(inputs))
