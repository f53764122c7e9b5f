"""Hugging Face ``transformers`` ResNet checkpoints -> densevit's :class:`ResNet`
(torchvision's names).

Layouts:

- torchvision (and the official DETR backbones, timm's ResNet): ``conv1``,
  ``bn1``, ``layer{1-4}.N.{conv,bn}{1-3}``, ``layer{1-4}.0.downsample.{0,1}``,
  ``fc``: already densevit's names, passed through.
- Hugging Face ``ResNetModel`` / ``ResNetForImageClassification``
  (``resnet.`` prefix optional): every conv / BN pair is
  ``...layer.{k}.convolution`` / ``...layer.{k}.normalization``, mapped to
  ``conv{k+1}`` / ``bn{k+1}``; ``embedder.embedder`` is the stem (``conv1``
  [64, 3, 7, 7], ``bn1``), ``encoder.stages.{i}`` is ``layer{i+1}`` and a
  block's ``shortcut`` its ``downsample``. Tensors are copied unchanged.

:func:`convert_hf_resnet_backbone` applies the HF mapping to the ``backbone.*``
part of a whole-detector state dict (the DETR and Deformable DETR converters).
"""
import re
from collections import OrderedDict

# HF name (after the optional 'resnet.' prefix) -> ours; applied in order, first match wins.
_RULES = [
    (r'^embedder\.embedder\.convolution\.(.+)$', r'conv1.\1'),
    (r'^embedder\.embedder\.normalization\.(.+)$', r'bn1.\1'),
    (r'^encoder\.stages\.(\d+)\.layers\.(\d+)\.shortcut\.convolution\.(.+)$',
     lambda m: f'layer{int(m[1]) + 1}.{m[2]}.downsample.0.{m[3]}'),
    (r'^encoder\.stages\.(\d+)\.layers\.(\d+)\.shortcut\.normalization\.(.+)$',
     lambda m: f'layer{int(m[1]) + 1}.{m[2]}.downsample.1.{m[3]}'),
    (r'^encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.(\d+)\.convolution\.(.+)$',
     lambda m: f'layer{int(m[1]) + 1}.{m[2]}.conv{int(m[3]) + 1}.{m[4]}'),
    (r'^encoder\.stages\.(\d+)\.layers\.(\d+)\.layer\.(\d+)\.normalization\.(.+)$',
     lambda m: f'layer{int(m[1]) + 1}.{m[2]}.bn{int(m[3]) + 1}.{m[4]}'),
]
# The ImageNet classifier of ResNetForImageClassification: not part of a backbone.
_DROP = re.compile(r'^classifier\.')


def convert_hf_resnet(state_dict):
    """HF ``ResNetModel`` / ``ResNetForImageClassification`` state dict -> ours.

    Raises:
        KeyError: listing every key no rule covers (nothing is dropped silently
            except the classifier).
    """
    out, unknown = {}, []
    for key, value in state_dict.items():
        name = key[len('resnet.'):] if key.startswith('resnet.') else key
        if _DROP.match(name):
            continue
        for pattern, repl in _RULES:
            new, n = re.subn(pattern, repl, name)
            if n:
                out[new] = value
                break
        else:
            unknown.append(key)
    if unknown:
        raise KeyError(f'convert_hf_resnet: no mapping for {len(unknown)} keys: {unknown[:10]}')
    return out


def convert_resnet(state_dict):
    """Any ResNet checkpoint -> our layout: HF keys are converted, torchvision /
    DETR keys (ours already) pass through (the ``fc`` head and stages a model
    does not build are dropped by :class:`ResNet` itself on load)."""
    if any(k.startswith(('embedder.', 'resnet.embedder.')) for k in state_dict):
        return convert_hf_resnet(state_dict)
    return state_dict


def convert_hf_resnet_backbone(state_dict, prefix='backbone.'):
    """The keys under ``prefix`` of a whole-model state dict, converted from an HF
    ``ResNet`` (``embedder.`` / ``encoder.stages.``) to torchvision's names; a
    backbone already in torchvision's names (timm's ResNet) is left as it is.
    Other keys are unchanged."""
    sub = OrderedDict((k[len(prefix):], v) for k, v in state_dict.items()
                      if k.startswith(prefix))
    if not any(k.startswith(('embedder.', 'encoder.stages.')) for k in sub):
        return state_dict
    out = OrderedDict((k, v) for k, v in state_dict.items() if not k.startswith(prefix))
    out.update((prefix + k, v) for k, v in convert_hf_resnet(sub).items())
    return out
