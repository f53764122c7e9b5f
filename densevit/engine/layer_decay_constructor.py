"""Layer-wise learning-rate decay for fine-tuning ViT / Swin (BEiT, MAE, ViTDet).

A pretrained backbone's early layers hold generic features that fine-tuning
should move least: layer ``i`` of ``L`` gets ``lr * rate ** (L + 1 - i)``. Layer
ids, read from parameter names:

- 0: the stem, ``backbone.patch_embed``, ``cls_token``, ``register_tokens``,
  ``mask_token``, a stem / shared ``pos_embed``, ``absolute_pos_embed``, ViT's
  ``pre_norm`` (CLIP's norm before the first layer);
- ViT: ``backbone.blocks.i`` -> i + 1 (a per-layer ``pos_embed.i`` goes with it);
- Swin / MiT: ``backbone.layers.i.blocks.j`` or ``backbone.stages.i.blocks.j`` ->
  the cumulative block index + 1 (blocks of earlier stages counted first); a
  stage's patch merging (``downsample``) and output ``norm`` take the id of its
  last block, MiT's per-stage ``patch_embed`` that of the block before it;
- everything else (final norms, neck, heads): L + 1, the full learning rate.

``full_rate_last_blocks=N`` leaves the last N blocks at the full rate, as EoMT's trainer does
for the blocks its queries join (they learn a new task there); the blocks before keep their
decay. :class:`~densevit.engine.two_stage_warmup.TwoStageWarmupPolyLR` tells the backbone's
groups from the rest by ``layer_id`` (below the largest: the backbone's).

Weight decay is 0 for 1-d parameters (norm weights, biases, LayerScale's gammas) and
position tables / tokens (class, register, mask); the others keep the optimizer's ``weight_decay``. ``custom_keys``
(mmengine's ``paramwise_cfg`` option: ``{name part: dict(lr_mult, decay_mult)}``, the
longest matching part wins) multiply on top, e.g. Deformable DETR's 0.1 for its
sampling offsets.
"""
import re
from collections import OrderedDict

from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor

from densevit.registry import OPTIM_WRAPPER_CONSTRUCTORS

NO_DECAY_KEYS = ('pos_embed', 'cls_token', 'register_tokens', 'mask_token',
                 'absolute_pos_embed', 'relative_position_bias_table')
_STEM = ('patch_embed', 'cls_token', 'register_tokens', 'mask_token', 'absolute_pos_embed',
         'stem', 'pre_norm')


def stage_offsets(backbone):
    """Blocks before each stage, plus the total: [0, d0, d0+d1, ...] (None for ViT)."""
    stages = getattr(backbone, 'layers', None) or getattr(backbone, 'stages', None)
    if stages is None or not all(hasattr(s, 'blocks') for s in stages):
        return None
    offsets = [0]
    for stage in stages:
        offsets.append(offsets[-1] + len(stage.blocks))
    return offsets


def num_backbone_layers(backbone):
    """Blocks in the backbone: ViT ``len(blocks)``, Swin / MiT the sum over stages."""
    offsets = stage_offsets(backbone)
    if offsets is not None:
        return offsets[-1]
    return len(backbone.blocks)


def get_layer_id(name, num_layers, offsets=None):
    """Layer id of parameter ``name`` (module-level docstring has the rules)."""
    if not name.startswith('backbone.'):
        return num_layers + 1
    rest = name[len('backbone.'):]
    m = re.match(r'pos_embed\.(\d+)\.', rest)  # ViT's per-layer table: with its layer
    if m:
        return int(m.group(1)) + 1
    if rest.startswith(_STEM) or rest.startswith('pos_embed'):
        return 0
    m = re.match(r'blocks\.(\d+)\.', rest)
    if m:
        return int(m.group(1)) + 1
    m = re.match(r'(?:layers|stages)\.(\d+)\.(\w+)\.?(\d+)?', rest)
    if m and offsets is not None:
        stage, part = int(m.group(1)), m.group(2)
        if part == 'blocks' and m.group(3) is not None:
            return offsets[stage] + int(m.group(3)) + 1
        if part in ('downsample', 'norm'):
            return offsets[stage + 1]
        if part == 'patch_embed':
            return offsets[stage]
    return num_layers + 1


def custom_multipliers(name, custom_keys):
    """(lr_mult, decay_mult) of the longest ``custom_keys`` entry in ``name`` (1, 1 if none)."""
    for key in sorted(sorted(custom_keys), key=len, reverse=True):
        if key in name:
            return (custom_keys[key].get('lr_mult', 1.), custom_keys[key].get('decay_mult', 1.))
    return 1., 1.


def no_weight_decay(name, param, keys=NO_DECAY_KEYS):
    return param.ndim <= 1 or any(k in name for k in keys)


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """Param groups with layer-wise decayed learning rates (see the module docstring).

    ``paramwise_cfg``:
        layer_decay_rate (float): the rate (0.65 for ViT-B in MAE / ViTDet, 0.75
            for BEiT; 0.9 for Swin in SimMIM).
        num_layers (int, optional): L; default the backbone's block count (ViT
            depth, Swin's total blocks). Must not be smaller than that count.
        no_decay_keys (Sequence[str]): name parts with no weight decay (besides
            1-d parameters); default position tables and tokens.
        custom_keys (dict): ``{name part: dict(lr_mult=..., decay_mult=...)}``, multiplied
            into the layer's learning rate and weight decay (as mmengine's constructor).
        full_rate_last_blocks (int): the last N blocks at the full rate (default 0).

    Each group carries ``layer_id`` and ``lr_scale`` for inspection. Frozen
    parameters (``requires_grad=False``) are left out.
    """

    def add_params(self, params, module, prefix='', is_dcn_module=None):
        cfg = self.paramwise_cfg
        rate = cfg['layer_decay_rate']
        backbone = module.backbone
        offsets = stage_offsets(backbone)
        depth = num_backbone_layers(backbone)
        num_layers = cfg.get('num_layers', depth)
        if num_layers < depth:
            raise ValueError(f'paramwise_cfg.num_layers={num_layers} but the backbone has '
                             f'{depth} blocks')
        full_rate = cfg.get('full_rate_last_blocks', 0)
        if not 0 <= full_rate <= depth:
            raise ValueError(f'paramwise_cfg.full_rate_last_blocks={full_rate}: the backbone has '
                             f'{depth} blocks')
        keys = tuple(cfg.get('no_decay_keys', NO_DECAY_KEYS))
        groups = OrderedDict()
        for name, param in module.named_parameters(prefix=prefix.rstrip('.')):
            if not param.requires_grad:
                continue
            layer_id = get_layer_id(name, num_layers, offsets)
            decay = not no_weight_decay(name, param, keys)
            lr_mult, decay_mult = custom_multipliers(name, cfg.get('custom_keys', {}))
            key = (layer_id, decay, lr_mult, decay_mult)
            if key not in groups:
                exponent = 0 if layer_id > depth - full_rate else num_layers + 1 - layer_id
                scale = rate ** exponent * lr_mult
                groups[key] = dict(params=[], param_names=[], layer_id=layer_id, lr_scale=scale,
                                   lr=self.base_lr * scale,
                                   weight_decay=(self.base_wd or 0.) * decay_mult if decay
                                   else 0.)
            groups[key]['params'].append(param)
            groups[key]['param_names'].append(name)
        params.extend(groups[k] for k in sorted(groups))
        print_log(f'LayerDecayOptimWrapperConstructor: {num_layers} layers, rate {rate}: '
                  + ', '.join(f"layer {g['layer_id']} x{g['lr_scale']:.3g}"
                              f"{'' if g['weight_decay'] else ' (no wd)'}: "
                              f"{len(g['params'])}" for g in params), logger='current')
