"""What MAE, masked patch prediction and BEiT share: a ViT encoder, random draws, the modes."""
import inspect

import torch
from mmengine.model import BaseModel

from densevit.models.backbones.vit import VisionTransformer
from densevit.registry import MODELS
from densevit.structures import DataSample

from .masking import check_mask_ratio, check_maskable, check_patch_grid, per_image_draws

_VIT_DEFAULTS = {k: p.default for k, p in inspect.signature(VisionTransformer).parameters.items()}


class MaskedImageModel(BaseModel):
    """A densevit :class:`VisionTransformer` as ``self.backbone``, pre-trained by hiding or
    corrupting a fraction ``mask_ratio`` of each image's patches.

    ``self.backbone``'s state dict is exactly a ViT's, so a checkpoint's ``backbone.*``
    keys load into a ViT of the same config. In training the random draws (which
    patches, and how) come from torch's global generator (seeded by the config's
    ``randomness.seed``); in evaluation (``model.eval()``: validation, the
    reconstruction tool) each image gets its own generator, seeded by ``val_seed`` and
    its ``img_path``, so it is masked the same way at every validation and successive
    validation losses compare.

    Subclasses define ``draw(batch, num_patches, generator) -> dict of CPU tensors
    [batch, ...]``, ``run(inputs, tokens, hw, draws) -> dict`` (the 'tensor' output),
    ``loss(out, inputs) -> dict`` and ``predict(out, inputs, data_samples)``.

    Raises ValueError at build time naming the value: ``mask_ratio`` outside (0, 1); a
    backbone ``img_size`` that is not a whole grid of patches, or a grid of fewer than
    two patches, or one where ``mask_ratio`` would keep no patch or mask none; a hybrid
    ViT (its CNN stem would see the hidden pixels).
    """

    def __init__(self, backbone, mask_ratio, val_seed=0, data_preprocessor=None,
                 init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        what = type(self).__name__
        check_mask_ratio(mask_ratio)
        backbone = dict(backbone)
        if backbone.get('stem') is not None:
            raise ValueError(f'{what}: a hybrid ViT (backbone.stem) sees every pixel through its '
                             f'CNN before patches are masked or corrupted, so they would not be '
                             f'hidden; masked pre-training needs a plain ViT (stem=None)')
        check_patch_grid(backbone.get('img_size', _VIT_DEFAULTS['img_size']),
                         backbone.get('patch_size', _VIT_DEFAULTS['patch_size']),
                         f'{what} backbone')
        self.backbone = MODELS.build(backbone)
        if not isinstance(self.backbone, VisionTransformer):
            raise TypeError(f'{what}: the backbone must be a VisionTransformer, got '
                            f'{type(self.backbone).__name__}')
        check_maskable(self.backbone.grid_hw, mask_ratio, f'{what} backbone')
        self.mask_ratio = mask_ratio
        self.val_seed = val_seed
        self.pixel_patch = self.backbone.patch_size  # image pixels per patch side

    def draws(self, batch, num_patches, data_samples, device):
        """The random tensors of one forward (see the class doc for their source)."""
        if self.training:
            return {k: v.to(device) for k, v in self.draw(batch, num_patches, None).items()}
        return per_image_draws(lambda b, g: self.draw(b, num_patches, g), data_samples, batch,
                               self.val_seed, device)

    def raw_pixels(self, inputs):
        """The preprocessed batch with the data preprocessor's normalisation undone: the
        0..255 pixel values (channel order as the model sees them)."""
        dp = self.data_preprocessor
        if getattr(dp, '_enable_normalize', False):
            return inputs * dp.std + dp.mean
        return inputs

    def check_sizes(self, inputs, data_samples):
        """Every image of the batch must fill it: a padded one would be scored on padding."""
        H, W = inputs.shape[-2:]
        for ds in data_samples or ():
            shape = ds.metainfo.get('img_shape')
            if shape is not None and tuple(shape[:2]) != (H, W):
                raise ValueError(
                    f'{type(self).__name__}: image {ds.metainfo.get("img_path", "")} is '
                    f'{shape[0]}x{shape[1]} but its batch is {H}x{W} (padded); pre-training '
                    f'needs every image of a batch at one size: crop or resize them in the '
                    f'pipeline (RandomResizedCrop, Resize)')

    def annotate(self, data_samples, inputs, mask, **per_image):
        """Write on each DataSample its ``patch_mask`` [h, w] (from ``mask`` [B, N]) and, for
        each keyword, its row of the given [B, ...] tensor; returns ``data_samples``."""
        h, w = inputs.shape[-2] // self.pixel_patch, inputs.shape[-1] // self.pixel_patch
        for i, ds in enumerate(data_samples):
            ds.patch_mask = mask[i].reshape(h, w)
            for key, values in per_image.items():
                setattr(ds, key, values[i].detach())
        return data_samples

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``mode``: 'loss' -> dict of losses; 'predict' -> DataSamples with the
        per-image loss (see the subclass); 'tensor' -> the raw outputs (dict)."""
        if mode not in ('loss', 'predict', 'tensor'):
            raise ValueError(f"{type(self).__name__}.forward: mode must be 'loss', 'predict' "
                             f"or 'tensor', got {mode!r}")
        self.check_sizes(inputs, data_samples)
        tokens, hw = self.backbone.embed(inputs)
        check_maskable(hw, self.mask_ratio, f'{type(self).__name__} input')
        draws = self.draws(inputs.shape[0], hw[0] * hw[1], data_samples, inputs.device)
        out = self.run(inputs, tokens, hw, draws)
        if mode == 'tensor':
            return out
        if mode == 'loss':
            return self.loss(out, inputs)
        if data_samples is None:
            data_samples = [DataSample() for _ in range(inputs.shape[0])]
        return self.predict(out, inputs, data_samples)


class MaskedTokenClassifier(MaskedImageModel):
    """A :class:`MaskedImageModel` whose head classifies each masked patch (masked patch
    prediction's mean colours, BEiT's visual tokens): ``run`` returns ``logits`` [B, N, K],
    ``target`` [B, N] and ``mask`` [B, N] bool, and the head (a
    :class:`~.heads.PatchClassifierHead`) scores the masked patches.

    'loss' gives ``loss_<objective>`` (cross-entropy over the batch's masked patches) and
    ``acc_<objective>``; 'predict' writes each image's ``pretrain_loss`` and
    ``pretrain_acc`` over its masked patches (:class:`PretrainLossMetric`).
    """

    objective = ''  # the suffix of the logged loss and accuracy

    def loss(self, out, inputs):
        logits, target, mask = out['logits'], out['target'], out['mask']
        with torch.no_grad():
            acc = (logits[mask].argmax(-1) == target[mask]).float().mean()
        return {f'loss_{self.objective}': self.head.loss(logits, target, mask),
                f'acc_{self.objective}': acc}

    def predict(self, out, inputs, data_samples):
        losses, accs = self.head.per_image(out['logits'], out['target'], out['mask'])
        return self.annotate(data_samples, inputs, out['mask'], pretrain_loss=losses,
                             pretrain_acc=accs)
