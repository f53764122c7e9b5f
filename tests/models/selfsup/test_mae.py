"""MAE: the loss against a brute-force reference, what the encoder sees, keys, evaluation masks."""
import pytest
import torch

from densevit.models.selfsup.masking import patchify
from densevit.structures import DataSample

from selfsup_models import PE_CONFIGS, build, mae_cfg, pe_id, vit_cfg


def reference_loss(pred, img, mask, P, norm_pix):
    """Patch by patch in plain Python: the mean over the patches where ``mask`` is True of the
    mean squared error against the patch's pixels (row by row, channels innermost),
    normalised by the patch's own mean and unbiased variance when ``norm_pix``."""
    B, C, H, W = img.shape
    total, count = 0.0, 0
    for b in range(B):
        for r in range(H // P):
            for c in range(W // P):
                n = r * (W // P) + c
                if not mask[b, n]:
                    continue
                patch = img[b, :, r * P:(r + 1) * P, c * P:(c + 1) * P].permute(1, 2, 0).reshape(-1)
                if norm_pix:
                    mean = patch.sum() / patch.numel()
                    var = ((patch - mean) ** 2).sum() / (patch.numel() - 1)
                    patch = (patch - mean) / (var + 1e-6).sqrt()
                total += ((pred[b, n] - patch) ** 2).sum() / patch.numel()
                count += 1
    return total / count


@pytest.mark.parametrize('norm_pix,masked_only', [(True, True), (False, True), (True, False)])
def test_loss_equals_brute_force(norm_pix, masked_only):
    model = build(mae_cfg(norm_pix=norm_pix, masked_only=masked_only, img_size=(16, 24))).train()
    img = torch.randn(3, 3, 16, 24)
    torch.manual_seed(5)
    out = model(img, mode='tensor')
    torch.manual_seed(5)  # the same masks
    loss = model(img, mode='loss')['loss_rec']
    assert out['mask'].sum(1).tolist() == [4, 4, 4]  # 6 patches, 75% hidden: round(1.5) = 2 kept
    scored = out['mask'] if masked_only else torch.ones_like(out['mask'])
    ref = reference_loss(out['pred'].detach(), img, scored, 8, norm_pix)
    torch.testing.assert_close(loss.detach(), ref, rtol=1e-5, atol=1e-6)
    loss.backward()
    assert model.backbone.patch_embed.proj.weight.grad.abs().sum() > 0
    assert model.neck.mask_token.grad.abs().sum() > 0


def test_trains_under_autocast_as_in_fp32():
    """--amp: the decoder's mask token joins the autocast dtype of the tokens it is scattered
    among (a CUDA check found scatter refusing fp32 into bf16); the loss stays the brute-force
    one of the fp32 model within bf16's precision, on the same masks."""
    model = build(mae_cfg(norm_pix=False)).train()
    img = torch.randn(2, 3, 32, 32)
    torch.manual_seed(3)
    out = model(img, mode='tensor')
    torch.manual_seed(3)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        loss = model(img, mode='loss')['loss_rec']
    loss.backward()
    ref = reference_loss(out['pred'].detach(), img, out['mask'], 8, False)
    torch.testing.assert_close(loss.detach().float(), ref, rtol=3e-2, atol=1e-3)
    assert model.neck.mask_token.grad.abs().sum() > 0


def test_encoder_never_sees_the_masked_pixels():
    model = build(mae_cfg()).eval()
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = model(img, mode='tensor')
        hidden = out['mask'].reshape(2, 4, 4).repeat_interleave(8, 1).repeat_interleave(8, 2)
        changed = torch.where(hidden[:, None], torch.randn_like(img), img)
        again = model(changed, mode='tensor')
    assert torch.equal(again['mask'], out['mask'])
    torch.testing.assert_close(again['pred'], out['pred'])


def test_checkpoint_keys_backbone_is_a_vit():
    model = build(mae_cfg())
    vit = build(vit_cfg())
    sd = model.state_dict()
    backbone = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    assert {k: v.shape for k, v in backbone.items()} == {k: v.shape
                                                         for k, v in vit.state_dict().items()}
    vit.load_state_dict(backbone)  # strict
    rest = {k.split('.')[0] for k in sd if not k.startswith('backbone.')}
    assert rest == {'neck'}  # the head has no parameters
    assert 'neck.mask_token' in sd and 'neck.pred.weight' in sd


def samples(*names):
    return [DataSample(metainfo=dict(img_path=f'/data/{n}.png')) for n in names]


def test_evaluation_masks_are_the_same_for_an_image_in_any_batch():
    model = build(mae_cfg()).eval()
    img = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        both = model(img, samples('a', 'b', 'c'), mode='predict')
        alone = model(img[2:], samples('c'), mode='predict')
        again = model(img, samples('a', 'b', 'c'), mode='predict')
    assert torch.equal(both[2].patch_mask, alone[0].patch_mask)
    assert not torch.equal(both[0].patch_mask, both[1].patch_mask)
    assert [float(s.pretrain_loss) for s in both] == [float(s.pretrain_loss) for s in again]
    model.val_seed = 1
    with torch.no_grad():
        other = model(img, samples('a', 'b', 'c'), mode='predict')
    assert not torch.equal(other[0].patch_mask, both[0].patch_mask)


def test_predict_pastes_visible_patches_and_scores_each_image():
    model = build(mae_cfg()).eval()
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = model(img, mode='tensor')
        pred = model(img, mode='predict')
    for i, s in enumerate(pred):
        visible = ~s.patch_mask.repeat_interleave(8, 0).repeat_interleave(8, 1)
        assert torch.equal(s.recon_pixels[:, visible], img[i][:, visible])
        ref = reference_loss(out['pred'][i:i + 1], img[i:i + 1], out['mask'][i:i + 1], 8, True)
        torch.testing.assert_close(s.pretrain_loss, ref, rtol=1e-5, atol=1e-6)


def test_reconstruction_statistics_and_pasting():
    """norm_pix: a perfect prediction with each patch's own statistics is the image; by default
    a hidden patch gets the mean of the visible patches' means and variances instead."""
    model = build(mae_cfg())
    img = torch.randn(2, 3, 32, 32)
    target = model.head.target(img)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[:, 5:] = True
    recon = model.head.reconstruct(target, img, mask, true_stats=True)
    torch.testing.assert_close(recon, img, rtol=1e-4, atol=1e-4)
    recon = patchify(model.head.reconstruct(target, img, mask), 8)
    patches = patchify(img, 8)
    assert torch.equal(recon[:, :5], patches[:, :5])  # visible: pasted as they are
    mean, var = patches.mean(-1), patches.var(-1)
    for b in range(2):
        m, v = mean[b, :5].mean(), var[b, :5].mean()
        torch.testing.assert_close(recon[b, 5:], target[b, 5:] * (v + 1e-6).sqrt() + m,
                                   rtol=1e-4, atol=1e-5)
    raw = patchify(model.head.reconstruct(target, img, mask, paste=False, true_stats=True), 8)
    torch.testing.assert_close(raw, patches, rtol=1e-4, atol=1e-4)  # every patch predicted


@pytest.mark.parametrize('pe', PE_CONFIGS, ids=pe_id)
def test_every_position_embedding_trains(pe):
    model = build(mae_cfg(pos_embed=pe, with_cls_token=pe is None)).train()
    loss = model(torch.randn(2, 3, 32, 32), mode='loss')['loss_rec']
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.backbone.pos_embed.parameters()] if pe else []
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_decoder_refuses_a_position_embedding_it_cannot_use():
    cfg = mae_cfg()
    cfg['neck']['pos_embed'] = 'relative'
    with pytest.raises(ValueError, match="pos_embed must be one of .* at the stem"):
        build(cfg)


def test_images_of_another_size_than_their_batch_are_refused():
    model = build(mae_cfg()).eval()
    data = model.data_preprocessor(dict(
        inputs=[torch.zeros(3, 32, 32, dtype=torch.uint8), torch.zeros(3, 24, 32, dtype=torch.uint8)],
        data_samples=[DataSample(metainfo=dict(img_path='a.png', img_shape=(32, 32))),
                      DataSample(metainfo=dict(img_path='b.png', img_shape=(24, 32)))]), False)
    with pytest.raises(ValueError, match='image b.png is 24x32 but its batch is 32x32 .padded.'):
        model(**data, mode='predict')


def test_xavier_init_is_maes_and_spares_a_loaded_encoder(tmp_path):
    """``xavier_init``: every encoder Linear and the patch projection (as a Linear from the
    flattened patch) uniform in +-sqrt(6 / (fan_in + fan_out)) with its variance, biases 0;
    the ViT's own truncated N(0, 0.02) otherwise; an encoder loaded from a file is left as
    loaded."""
    default = build(mae_cfg()).backbone
    xavier = build(dict(mae_cfg(), xavier_init=True)).backbone
    for name, m in xavier.named_modules():
        w = m.weight.reshape(m.weight.shape[0], -1) if name in ('blocks.0.mlp.fc1',
                                                                 'patch_embed.proj') else None
        if w is None:
            continue
        bound = (6 / (w.shape[0] + w.shape[1])) ** .5
        assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
        assert w.var().item() == pytest.approx(bound ** 2 / 3, rel=0.1)
        assert not m.bias.any()
    fc1 = default.blocks[0].mlp.fc1.weight
    assert fc1.std().item() == pytest.approx(0.02, rel=0.15)  # the ViT's own
    torch.save({f'backbone.{k}': v for k, v in default.state_dict().items()}, tmp_path / 'e.pth')
    cfg = mae_cfg()
    cfg['backbone']['init_cfg'] = dict(type='Pretrained', checkpoint=str(tmp_path / 'e.pth'))
    loaded = build(dict(cfg, xavier_init=True)).backbone
    torch.testing.assert_close(loaded.blocks[0].mlp.fc1.weight, fc1, rtol=0, atol=0)
