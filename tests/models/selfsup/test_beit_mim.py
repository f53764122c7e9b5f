"""BEiT masked image modelling: blockwise masks against BEiT's own generator and brute-force
properties, the k-means tokenizer against a numpy nearest-codeword search, the loss by hand,
what the encoder sees, and the tokenizer file's codebook size."""
import math
import random

import numpy as np
import pytest
import torch

from densevit.models.selfsup.masking import block_mask
from densevit.models.selfsup.tokenizer import nearest_codeword, patch_features

from selfsup_models import PREPROCESSOR, build, vit_cfg


class BEiTReferenceMaskingGenerator:
    """BEiT's ``MaskingGenerator`` (microsoft/unilm, beit/masking_generator.py), transcribed with
    numpy and an explicit ``random.Random`` in place of the module ``random``."""

    def __init__(self, input_size, num_masking_patches, min_num_patches=4, max_num_patches=None,
                 min_aspect=0.3, max_aspect=None):
        self.height, self.width = input_size
        self.num_masking_patches = num_masking_patches
        self.min_num_patches = min_num_patches
        self.max_num_patches = num_masking_patches if max_num_patches is None else max_num_patches
        max_aspect = max_aspect or 1 / min_aspect
        self.log_aspect_ratio = (math.log(min_aspect), math.log(max_aspect))

    def _mask(self, mask, max_mask_patches, rng):
        delta = 0
        for _ in range(10):
            target_area = rng.uniform(self.min_num_patches, max_mask_patches)
            aspect_ratio = math.exp(rng.uniform(*self.log_aspect_ratio))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < self.width and h < self.height:
                top = rng.randint(0, self.height - h)
                left = rng.randint(0, self.width - w)
                num_masked = mask[top: top + h, left: left + w].sum()
                if 0 < h * w - num_masked <= max_mask_patches:
                    for i in range(top, top + h):
                        for j in range(left, left + w):
                            if mask[i, j] == 0:
                                mask[i, j] = 1
                                delta += 1
                if delta > 0:
                    break
        return delta

    def __call__(self, rng):
        mask = np.zeros((self.height, self.width), dtype=int)
        mask_count = 0
        while mask_count < self.num_masking_patches:
            max_mask_patches = min(self.num_masking_patches - mask_count, self.max_num_patches)
            delta = self._mask(mask, max_mask_patches, rng)
            if delta == 0:
                break
            mask_count += delta
        return mask


@pytest.mark.parametrize('grid, target', [((14, 14), 75), ((16, 16), 102), ((6, 8), 19)])
def test_block_mask_is_beits_generator(grid, target):
    """The same draws give BEiT's mask, patch for patch (BEiT's pre-training setting: 75 of
    14x14, at least 16 a block, aspect in [0.3, 1/0.3]; the quickstart's 102 of 16x16)."""
    ref = BEiTReferenceMaskingGenerator(grid, target, min_num_patches=16, min_aspect=0.3)
    for seed in range(200):
        expected = ref(random.Random(seed))
        ours = block_mask(grid, target, random.Random(seed), min_num_patches=16, min_aspect=0.3)
        if expected.sum():  # (BEiT gives up on an empty mask; densevit tries again)
            assert np.array_equal(ours.numpy(), expected.astype(bool)), seed


def components(mask):
    """4-connected components of a [h, w] bool array (brute-force flood fill): their sizes."""
    mask = np.asarray(mask, dtype=bool)
    seen = np.zeros_like(mask)
    sizes = []
    for start in zip(*np.nonzero(mask), strict=True):
        if seen[start]:
            continue
        stack, size = [start], 0
        seen[start] = True
        while stack:
            r, c = stack.pop()
            size += 1
            for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if 0 <= rr < mask.shape[0] and 0 <= cc < mask.shape[1] and mask[rr, cc] \
                        and not seen[rr, cc]:
                    seen[rr, cc] = True
                    stack.append((rr, cc))
        sizes.append(size)
    return sizes


class RecordingRandom(random.Random):
    """Python's generator, keeping every block the masking draws (area, aspect, top, left)."""

    def __init__(self, seed):
        super().__init__(seed)
        self.draws = []

    def uniform(self, a, b):
        value = super().uniform(a, b)
        self.draws.append(('uniform', a, b, value))
        return value

    def randint(self, a, b):
        value = super().randint(a, b)
        self.draws.append(('randint', a, b, value))
        return value


def placed_blocks(draws):
    """(top, left, rows, cols) of every block placed (two uniforms then two randints)."""
    blocks = []
    for i in range(len(draws) - 3):
        (k0, *_), (k1, lo, hi, log_r), (k2, _, h_max, top), (k3, _, w_max, left) = draws[i:i + 4]
        if (k0, k1, k2, k3) == ('uniform', 'uniform', 'randint', 'randint'):
            area = draws[i][3]
            rows = int(round(math.sqrt(area * math.exp(log_r))))
            cols = int(round(math.sqrt(area / math.exp(log_r))))
            blocks.append((top, left, rows, cols, area, math.exp(log_r), h_max, w_max))
    return blocks


def test_block_mask_properties_by_brute_force():
    """Over many masks of the quickstart's grid: never more than the target and on average
    within a few patches of it, every block a rectangle smaller than the grid with an aspect
    ratio that rounds from [0.3, 1/0.3], the mask exactly the union of its blocks, and
    contiguous: large 4-connected pieces, unlike a random mask of the same count."""
    h, w, target = 16, 16, 102
    counts, piece_sizes, random_piece_sizes = [], [], []
    for seed in range(300):
        rng = RecordingRandom(seed)
        mask = block_mask((h, w), target, rng, min_num_patches=16, min_aspect=0.3).numpy()
        count = int(mask.sum())
        counts.append(count)
        assert 0 < count <= target
        painted = np.zeros((h, w), dtype=bool)
        for top, left, rows, cols, _area, aspect, h_max, w_max in placed_blocks(rng.draws):
            assert 1 <= rows < h and 1 <= cols < w
            assert (h_max, w_max) == (h - rows, w - cols) and 0 <= top <= h_max
            assert 0.3 - 1e-9 <= aspect <= 1 / 0.3 + 1e-9
            # the rounded sides come from a ratio in range
            assert 0.3 <= (rows + .5) / max(cols - .5, 1e-9)
            assert (rows - .5) / (cols + .5) <= 1 / 0.3
            # a block is placed when it adds a patch, without overshooting the target
            new = (~painted[top:top + rows, left:left + cols]).sum()
            if 0 < new <= target - painted.sum():
                painted[top:top + rows, left:left + cols] = True
        assert np.array_equal(painted, mask), seed
        piece_sizes += components(mask)
        flat = np.zeros(h * w, dtype=bool)
        flat[np.random.default_rng(seed).permutation(h * w)[:count]] = True
        random_piece_sizes += components(flat.reshape(h, w))
    counts = np.array(counts)  # here: 101.45 on average, at least 91
    assert target - counts.mean() < 3 and (counts >= target - 16).all()
    assert np.mean(piece_sizes) > 4 * np.mean(random_piece_sizes)  # here: 67 against 3.2


def test_block_mask_never_leaves_an_image_unmasked():
    """A tight grid where BEiT's 10 tries often fail: densevit tries again."""
    for seed in range(100):
        assert block_mask((5, 5), 10, random.Random(seed), min_num_patches=16).any()


# ---------------------------------------------------------------- the model

TEACHER = vit_cfg(img_size=48)


def beit_cfg(num_tokens=16, checkpoint=None, **kwargs):
    return dict(type='BEiT', mask_ratio=0.4, data_preprocessor=PREPROCESSOR,
                backbone=vit_cfg(img_size=48, pos_embed=dict(type='relative',
                                                             placement='every_layer_shared'),
                                 layer_scale_init_value=0.1),
                head=dict(type='BEiTHead', num_tokens=num_tokens),
                tokenizer=dict(type='KMeansTokenizer', teacher=TEACHER, checkpoint=checkpoint),
                **kwargs)


def test_tokenizer_assigns_the_nearest_codeword_numpy():
    model = build(beit_cfg(num_tokens=16)).eval()
    tok = model.tokenizer
    images = torch.randn(2, 3, 48, 48)
    ids = tok(images)
    assert ids.shape == (2, 36)
    # the teacher's output map, flattened row-major, as the features
    with torch.no_grad():
        (fmap,) = tok.teacher(images)
    feats = fmap.permute(0, 2, 3, 1).reshape(2, 36, -1).numpy().astype(np.float64)
    feats /= np.linalg.norm(feats, axis=-1, keepdims=True)
    code = tok.codebook.numpy().astype(np.float64)
    dist = ((feats[:, :, None, :] - code[None, None]) ** 2).sum(-1)  # [2, 36, K]
    assert np.array_equal(ids.numpy(), dist.argmin(-1))
    # without normalisation: plain Euclidean distance
    raw = fmap.permute(0, 2, 3, 1).reshape(2, 36, -1).numpy().astype(np.float64)
    code = np.random.default_rng(0).normal(size=(16, raw.shape[-1]))
    expected = ((raw[:, :, None] - code[None, None]) ** 2).sum(-1).argmin(-1)
    got = nearest_codeword(torch.from_numpy(raw).float(), torch.from_numpy(code).float(), False)
    assert np.array_equal(got.numpy(), expected)
    torch.testing.assert_close(patch_features(tok.teacher, images),
                               torch.from_numpy(raw).float())


def test_the_teacher_is_frozen():
    model = build(beit_cfg()).train()
    assert not model.tokenizer.teacher.training
    assert not any(p.requires_grad for p in model.tokenizer.parameters())
    before = {k: v.clone() for k, v in model.tokenizer.state_dict().items()}
    model(torch.randn(2, 3, 48, 48), mode='loss')['loss_mim'].backward()
    assert all(p.grad is None for p in model.tokenizer.parameters())
    for k, v in model.tokenizer.state_dict().items():
        assert torch.equal(v, before[k])


def test_loss_is_cross_entropy_over_exactly_the_masked_patches():
    model = build(beit_cfg(num_tokens=16)).train()
    img = torch.randn(3, 3, 48, 48)
    torch.manual_seed(5)
    out = model(img, mode='tensor')
    torch.manual_seed(5)
    losses = model(img, mode='loss')
    mask = out['mask'].numpy()
    target = model.num_masking_patches
    assert target == 36 - round(36 * 0.6) == 14
    assert (mask.sum(1) <= target).all() and mask.sum() > 0
    assert torch.equal(out['target'], model.tokenizer(img))  # the un-masked image's tokens
    logits = out['logits'].detach().numpy().astype(np.float64)
    labels = out['target'].numpy()
    terms = []
    for b, n in zip(*np.nonzero(mask), strict=True):
        z = logits[b, n]
        log_softmax = z - z.max() - np.log(np.exp(z - z.max()).sum())
        terms.append(-log_softmax[labels[b, n]])
    assert losses['loss_mim'].item() == pytest.approx(np.mean(terms), rel=1e-5)
    hits = [logits[b, n].argmax() == labels[b, n] for b, n in zip(*np.nonzero(mask), strict=True)]
    assert losses['acc_mim'].item() == pytest.approx(np.mean(hits))
    losses['loss_mim'].backward()
    assert model.mask_token.grad is not None and model.head.fc.weight.grad is not None


def test_predict_scores_each_image_on_its_masked_patches():
    model = build(beit_cfg(num_tokens=16)).eval()
    img = torch.randn(2, 3, 48, 48)
    out = model(img, mode='tensor')
    samples = model(img, mode='predict')
    for i, ds in enumerate(samples):
        m = out['mask'][i]
        ce = torch.nn.functional.cross_entropy(out['logits'][i][m], out['target'][i][m])
        assert float(ds.pretrain_loss) == pytest.approx(ce.item(), rel=1e-5)
        assert torch.equal(ds.patch_mask.flatten(), m)
    # evaluation masks are the same at every call
    assert torch.equal(model(img, mode='tensor')['mask'], out['mask'])


def test_the_encoder_sees_the_mask_token_and_nothing_of_the_masked_pixels(monkeypatch):
    model = build(beit_cfg(num_tokens=16)).eval()
    img = torch.randn(2, 3, 48, 48)
    seen = []
    encode = model.backbone.encode
    monkeypatch.setattr(model.backbone, 'encode',
                        lambda tokens, hw, keep=None: seen.append(tokens) or encode(tokens, hw))
    fixed = torch.randint(16, (2, 36))
    monkeypatch.setattr(model.tokenizer, 'forward', lambda images: fixed)
    out = model(img, mode='tensor')
    mask = out['mask']
    # the patch embedding by hand: each 8x8 patch through the projection
    w = model.backbone.patch_embed.proj.weight.reshape(32, -1)
    b = model.backbone.patch_embed.proj.bias
    patches = img.reshape(2, 3, 6, 8, 6, 8).permute(0, 2, 4, 1, 3, 5).reshape(2, 36, -1)
    embedded = patches @ w.t() + b
    (tokens,) = seen
    torch.testing.assert_close(tokens[~mask], embedded[~mask].detach(), rtol=1e-5, atol=1e-5)
    assert torch.equal(tokens[mask], model.mask_token[0].expand(int(mask.sum()), -1).detach())
    # any change to the masked patches' pixels: the same logits, the same loss
    noisy = img.clone()
    pixel_mask = mask.reshape(2, 6, 6).repeat_interleave(8, 1).repeat_interleave(8, 2)
    noisy[pixel_mask[:, None].expand_as(img)] = torch.randn(int(pixel_mask.sum()) * 3) * 10
    assert not torch.equal(noisy, img)
    again = model(noisy, mode='tensor')
    assert torch.equal(again['mask'], mask)
    torch.testing.assert_close(again['logits'], out['logits'], rtol=0, atol=0)
    model.train()
    torch.manual_seed(1)
    loss = model(img, mode='loss')['loss_mim']
    torch.manual_seed(1)
    train_mask = model(img, mode='tensor')['mask']
    noisy = img.clone()
    pixel_mask = train_mask.reshape(2, 6, 6).repeat_interleave(8, 1).repeat_interleave(8, 2)
    noisy[pixel_mask[:, None].expand_as(img)] = 5.0
    torch.manual_seed(1)
    assert model(noisy, mode='loss')['loss_mim'].item() == loss.item()


def write_tokenizer(path, k, dims=32, teacher=None, **meta):
    """A tokenizer file as tools/pretrain/make_tokenizer.py writes it."""
    teacher = teacher if teacher is not None else build(TEACHER)
    torch.save(dict(codebook=torch.nn.functional.normalize(torch.randn(k, dims), dim=1),
                    teacher=teacher.state_dict(),
                    meta=dict(dict(layer=-1, k=k, normalize=True), **meta)), path)
    return str(path)


def test_the_tokenizer_file_is_loaded(tmp_path):
    teacher = build(TEACHER, seed=7)
    path = write_tokenizer(tmp_path / 'tok.pth', 16, teacher=teacher)
    model = build(beit_cfg(num_tokens=16, checkpoint=path))
    saved = torch.load(path, weights_only=True)
    assert torch.equal(model.tokenizer.codebook, saved['codebook'])
    for k, v in teacher.state_dict().items():
        assert torch.equal(model.tokenizer.teacher.state_dict()[k], v)


def test_a_codebook_of_another_size_than_the_head_is_refused(tmp_path):
    path = write_tokenizer(tmp_path / 'tok64.pth', 64)
    with pytest.raises(ValueError) as err:
        build(beit_cfg(num_tokens=16, checkpoint=path))
    msg = str(err.value)
    assert 'codebook of 64 visual tokens' in msg and 'predicts 16' in msg and path in msg
    wide = write_tokenizer(tmp_path / 'wide.pth', 16, dims=48)
    with pytest.raises(ValueError, match=r'48 dimensions .* 32 wide'):
        build(beit_cfg(num_tokens=16, checkpoint=wide))
    other_layer = write_tokenizer(tmp_path / 'layer0.pth', 16, layer=0)
    with pytest.raises(ValueError, match=r'layer=0 but tokenizer.layer=-1'):
        build(beit_cfg(num_tokens=16, checkpoint=other_layer))
    with pytest.raises(FileNotFoundError, match='make_tokenizer'):
        build(beit_cfg(num_tokens=16, checkpoint=str(tmp_path / 'missing.pth')))


def test_a_grid_without_room_for_a_block_is_refused():
    cfg = beit_cfg()
    cfg['backbone'] = vit_cfg(img_size=32)  # 4x4: blocks of at most 3x3
    with pytest.raises(ValueError, match=r'min_num_patches=16 .* 4x4 patch grid'):
        build(cfg)
    build(dict(cfg, min_num_patches=4))


def test_images_of_another_size_are_refused():
    model = build(beit_cfg()).train()
    with pytest.raises(ValueError,
                       match=r'an input of 49 patches; .* grid of 6x6 \(img_size 48x48\)'):
        model(torch.randn(1, 3, 56, 56), mode='loss')
