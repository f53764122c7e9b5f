"""``with_cp=True`` (recompute blocks in the backward pass) gives the same outputs and
gradients as ``with_cp=False`` for ViT, Swin and MiT blocks."""
import inspect

import pytest
import torch

from densevit.registry import MODELS

BACKBONES = {
    'VisionTransformer': dict(img_size=32, patch_size=8, drop_path_rate=0.,
                              arch=dict(embed_dims=16, num_layers=2, num_heads=2,
                                        feedforward_channels=32)),
    'SwinTransformer': dict(arch=dict(embed_dims=8, depths=[2, 2], num_heads=[1, 2]),
                            window_size=2, out_indices=(0, 1), drop_path_rate=0.),
    'MixVisionTransformer': dict(arch=None, embed_dims=[8, 16], num_stages=2, num_layers=[2, 1],
                                 num_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
                                 sr_ratios=[2, 1], out_indices=(0, 1), drop_path_rate=0.),
}


@pytest.mark.parametrize('name', list(BACKBONES))
def test_with_cp_matches_plain_backward(name):
    cls = MODELS.get(name)
    assert 'with_cp' in inspect.signature(cls.__init__).parameters, name
    torch.manual_seed(0)
    plain = MODELS.build(dict(type=name, with_cp=False, **BACKBONES[name])).train()
    ckpt = MODELS.build(dict(type=name, with_cp=True, **BACKBONES[name])).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 32, 32)
    grads, saved = [], []
    for model in (plain, ckpt):
        inp = x.clone().requires_grad_()
        count = [0]

        def pack(t, count=count):
            count[0] += 1
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            outs = model(inp)
        saved.append(count[0])
        loss = sum((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() for o in outs)
        loss.backward()
        grads.append([inp.grad] + [p.grad for p in model.parameters()])
        grads[-1].append(torch.stack([o.sum() for o in outs]).detach())
    # checkpointed blocks keep their activations out of the graph (recomputed instead)
    assert saved[1] < saved[0]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
