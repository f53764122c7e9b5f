"""Tiny Hugging Face reference models with every saved tensor random, shared by the
converter tests (transformers is the reference implementation)."""
import pytest
import torch

from densevit.checkpoint.read import read_checkpoint
from densevit.utils.random_init import randomize_

# the tiny DETR's sizes; densevit configs built to match use the same
DETR_SIZES = dict(d_model=32, heads=2, ffn=64, queries=5, classes=3, layers=2)


def _spread(detr, seed):
    """What randomize_ leaves too uniform for a test of the queries: the query embeddings
    and the cross-attention q / k projections come from N(0, 1), so queries attend to
    different places. Otherwise every query predicts nearly the same logits and a swap
    of query rows would go unseen."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weights = [detr.query_position_embeddings.weight]
        for layer in detr.decoder.layers:
            weights += [layer.encoder_attn.q_proj.weight, layer.encoder_attn.k_proj.weight]
        for w in weights:
            w.copy_(torch.randn(w.shape, generator=g))


def tiny_hf_detr_config(out_features=('stage4',), **sizes):
    """An HF ``DetrConfig`` with an HF ResNet-50 layout of one block per stage (widths 32-256)
    returning ``out_features``, no dropout, ``auxiliary_loss=False``; :data:`DETR_SIZES`
    updated by ``sizes``. Skips without transformers."""
    transformers = pytest.importorskip('transformers')
    s = dict(DETR_SIZES, **sizes)
    backbone = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
        layer_type='bottleneck', out_features=list(out_features))
    return transformers.DetrConfig(
        use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
        d_model=s['d_model'], encoder_layers=s['layers'], decoder_layers=s['layers'],
        encoder_attention_heads=s['heads'], decoder_attention_heads=s['heads'],
        encoder_ffn_dim=s['ffn'], decoder_ffn_dim=s['ffn'], num_queries=s['queries'],
        num_labels=s['classes'], dropout=0., attention_dropout=0., activation_dropout=0.,
        auxiliary_loss=False)


def tiny_hf_detr(seed=0):
    """``DetrForObjectDetection`` (HF ResNet-50 layout with one block per stage, the sizes
    of :data:`DETR_SIZES`), every tensor random, in eval mode. Skips without transformers."""
    transformers = pytest.importorskip('transformers')
    # every tensor random (HF zero-initialises biases, sets its frozen BN to identity and
    # LayerNorms to 1 / 0), so any mis-mapped tensor shows in the outputs
    model = randomize_(transformers.DetrForObjectDetection(tiny_hf_detr_config()),
                       seed=seed).eval()
    _spread(model.model, seed + 1)
    return model


def tiny_hf_detr_segmentation(seed=0, **sizes):
    """``DetrForSegmentation``: :func:`tiny_hf_detr`'s model returning all four ResNet stages
    (the mask head's finer maps are stages 3, 2, 1), with its mask head; ``sizes`` update
    :data:`DETR_SIZES` (the mask head needs ``d_model + heads`` divisible by 8). Every tensor
    random, eval mode."""
    transformers = pytest.importorskip('transformers')
    config = tiny_hf_detr_config(out_features=('stage1', 'stage2', 'stage3', 'stage4'), **sizes)
    model = randomize_(transformers.DetrForSegmentation(config), seed=seed).eval()
    _spread(model.detr.model, seed + 1)
    return model


def resnet_kwargs_from_hf_config(config):
    """Our ``ResNet`` kwargs for an HF ``ResNetConfig`` (block type, widths, strides, style).

    Raises ValueError for HF configs our ResNet cannot express (stage widths
    not ``embedding_size * 2^i * expansion``, activation other than ReLU).
    """
    bottleneck = config.layer_type == 'bottleneck'
    expansion = 4 if bottleneck else 1
    base = config.embedding_size
    expected = [base * 2 ** i * expansion for i in range(4)]
    if list(config.hidden_sizes) != expected or len(config.depths) != 4:
        raise ValueError(f'HF hidden_sizes {config.hidden_sizes} are not the standard widths '
                         f'{expected} for embedding_size {base}')
    if config.hidden_act != 'relu':
        raise ValueError(f'HF hidden_act {config.hidden_act!r} unsupported (ReLU only)')
    return dict(
        depth=50 if bottleneck else 18,  # picks the block type; stage_blocks sets the counts
        stage_blocks=tuple(config.depths),
        in_channels=config.num_channels,
        base_channels=base,
        strides=(2 if config.downsample_in_first_stage else 1, 2, 2, 2),
        style='caffe' if getattr(config, 'downsample_in_bottleneck', False) else 'pytorch')


def outputs_of_both(hf, path, source, ours, convert, batch):
    """HF's model and densevit's ``ours`` loaded (strictly) with its weights converted by
    ``convert`` from the file at ``path`` (``source='hub_file'``) or from ``hf.state_dict()``,
    both run without gradients on ``batch`` = (x, pixel_mask, data samples) -> (HF's outputs,
    densevit's ``mode='tensor'`` outputs)."""
    sd = read_checkpoint(path) if source == 'hub_file' else hf.state_dict()
    ours.load_state_dict(convert(sd, strict=True), strict=True)
    x, pixel_mask, samples = batch
    with torch.no_grad():
        return hf(pixel_values=x, pixel_mask=pixel_mask), ours(x, samples, mode='tensor')


def official_detr_state_dict(ours):
    """densevit DETR weights (``backbone.*``, ``bbox_head.*`` of ``ours``, a module or a state
    dict) under the official repository's names (written out by hand)."""
    names = {'bbox_head.transformer.decoder_norm.': 'transformer.decoder.norm.',
             'bbox_head.query_embed.': 'query_embed.', 'bbox_head.input_proj.': 'input_proj.',
             'bbox_head.class_embed.': 'class_embed.', 'bbox_head.bbox_embed.': 'bbox_embed.',
             'backbone.': 'backbone.0.body.'}
    sd = {}
    items = ours.items() if isinstance(ours, dict) else ours.state_dict().items()
    for k, v in items:
        for new, old in names.items():
            if k.startswith(new):
                k = old + k[len(new):]
                break
        else:
            part = k.split('.')  # bbox_head.transformer.{encoder,decoder}.N.<module>...
            module = {'cross_attn': 'multihead_attn', 'ffn': None}.get(part[4], part[4])
            rest = part[5:] if module is None else [module] + part[5:]
            k = '.'.join(['transformer', part[2], 'layers', part[3]] + rest)
        sd[k] = v
    return sd
