"""MMSegmentation Swin fixture: an ImageNet file as MMSegmentation publishes them.

- ``mmseg_swin_imagenet``: ``swin_tiny_patch4_window7_224_20220317-*.pth`` in small:
  random tensors under the official repository's names and shapes, put through mmseg's
  own ``tools/model_converters/swin2mmseg.py`` and saved as that script saves (a bare
  state dict). The reference is mmseg's ``SwinTransformer`` loading it with its own
  ``init_cfg=dict(type='Pretrained', checkpoint=...)``.

The whole UperNet + Swin file, whose backbone the Swin tests also read, is made by
``make_upernet.py`` from this script's Swin settings and inputs.

Outputs: the backbone's maps (mmseg's own forward, eval mode) on a padded batch (two images
of different sizes padded bottom / right by mmseg's ``stack_batch``) and on single images
whose maps are smaller than, equal to and not a multiple of the window.
"""
import importlib.util
from pathlib import Path

import torch
from common import FIXTURES, import_openmmlab, save_io, versions

WINDOW = 7
# maps 8x8 then 4x4 (smaller than the window), 14x14 then 7x7 (the window: 224-like)
SINGLE_SIZES = [(29, 29), (56, 56)]


def swin_cfg(embed_dims, depths, num_heads, mlp_ratio, **kwargs):
    return dict(type='SwinTransformer', pretrain_img_size=224, embed_dims=embed_dims,
                patch_size=4, window_size=WINDOW, mlp_ratio=mlp_ratio, depths=depths,
                num_heads=num_heads, strides=(4, 2), out_indices=(0, 1), qkv_bias=True,
                drop_path_rate=0.3, use_abs_pos_embed=False, **kwargs)


def inputs():
    """A padded batch (as mmseg's stack_batch pads: bottom / right, zeros) and single images."""
    from mmseg.utils import stack_batch
    g = torch.Generator().manual_seed(1)
    images = [torch.randn(3, 37, 50, generator=g), torch.randn(3, 30, 41, generator=g)]
    batch, _ = stack_batch(images, size_divisor=1, pad_val=0)
    singles = {f'{h}x{w}': torch.randn(1, 3, h, w, generator=g) for h, w in SINGLE_SIZES}
    return dict(batch=batch, **singles)


def backbone_maps(backbone, xs):
    with torch.no_grad():
        return {name: list(backbone(x)) for name, x in xs.items()}


def official_imagenet_state_dict(embed_dims, depths, num_heads, mlp_ratio, img_size=56,
                                 num_classes=10, seed=0):
    """Random tensors under the official Swin classifier's names and shapes (incl. buffers)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, norm=False):
        noise = 0.2 * torch.randn(*shape, generator=g)
        return 1 + noise if norm else noise

    M = WINDOW
    coords = torch.stack(torch.meshgrid(torch.arange(M), torch.arange(M), indexing='ij')).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]) + M - 1
    index = rel[0] * (2 * M - 1) + rel[1]  # [M*M, M*M], the official relative_position_index
    sd = {'patch_embed.proj.weight': rand(embed_dims, 3, 4, 4),
          'patch_embed.proj.bias': rand(embed_dims),
          'patch_embed.norm.weight': rand(embed_dims, norm=True),
          'patch_embed.norm.bias': rand(embed_dims)}
    res = img_size // 4
    for i, (depth, heads) in enumerate(zip(depths, num_heads, strict=True)):
        C, hidden = embed_dims * 2 ** i, int(embed_dims * 2 ** i * mlp_ratio)
        for j in range(depth):
            p = f'layers.{i}.blocks.{j}.'
            sd.update({p + 'norm1.weight': rand(C, norm=True), p + 'norm1.bias': rand(C),
                       p + 'attn.relative_position_bias_table': rand((2 * M - 1) ** 2, heads),
                       p + 'attn.relative_position_index': index.clone(),
                       p + 'attn.qkv.weight': rand(3 * C, C), p + 'attn.qkv.bias': rand(3 * C),
                       p + 'attn.proj.weight': rand(C, C), p + 'attn.proj.bias': rand(C),
                       p + 'norm2.weight': rand(C, norm=True), p + 'norm2.bias': rand(C),
                       p + 'mlp.fc1.weight': rand(hidden, C), p + 'mlp.fc1.bias': rand(hidden),
                       p + 'mlp.fc2.weight': rand(C, hidden), p + 'mlp.fc2.bias': rand(C)})
            if j % 2 and res > M:  # the official block keeps a mask only where it shifts
                sd[p + 'attn_mask'] = torch.zeros((res // M) ** 2, M * M, M * M)
        if i < len(depths) - 1:
            p = f'layers.{i}.downsample.'
            sd.update({p + 'reduction.weight': rand(2 * C, 4 * C),
                       p + 'norm.weight': rand(4 * C, norm=True), p + 'norm.bias': rand(4 * C)})
            res //= 2
    C = embed_dims * 2 ** (len(depths) - 1)
    sd.update({'norm.weight': rand(C, norm=True), 'norm.bias': rand(C),
               'head.weight': rand(num_classes, C), 'head.bias': rand(num_classes)})
    return sd


def swin2mmseg():
    """mmseg's own converter module (tools/model_converters/swin2mmseg.py in the wheel)."""
    import mmseg
    path = Path(mmseg.__file__).parent / '.mim/tools/model_converters/swin2mmseg.py'
    spec = importlib.util.spec_from_file_location('swin2mmseg', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_imagenet(xs):
    arch = dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4), mlp_ratio=4)
    official = official_imagenet_state_dict(**arch)
    weights = swin2mmseg().convert_swin(official)
    name = 'mmseg_swin_imagenet'
    path = FIXTURES / f'{name}.pth'
    torch.save(weights, path)  # as swin2mmseg.py's main() saves it
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmseg'):  # not build(): mmseg's Swin
        model = MODELS.build(swin_cfg(**arch, init_cfg=dict(  # .train() returns None
            type='Pretrained', checkpoint=str(path))))
    model.init_weights()  # mmseg's own loader: what its configs do with this file
    model.eval()
    save_io(name, xs, backbone_maps(model, xs),
            f'official-layout random Swin (embed 16, depths 2/2, heads 2/4, '
            f"window {WINDOW}) through mmseg's swin2mmseg.py; outputs: mmseg "
            f'SwinTransformer(init_cfg=Pretrained) maps per input; {versions()}')


def main():
    import_openmmlab()
    make_imagenet(inputs())


if __name__ == '__main__':
    main()
