"""Masked autoencoder pre-training of a ViT (He et al. 2022, "Masked Autoencoders Are Scalable
Vision Learners")."""
import torch
from torch import nn

from densevit.models.backbones.init import init_linear_or_norm
from densevit.registry import MODELS

from .base import MaskedImageModel
from .masking import noise_masking, num_kept


@MODELS.register_module()
class MAE(MaskedImageModel):
    """MAE: encode the visible patches only, decode every patch's pixels, score the masked ones.

    Per image a random ``mask_ratio`` of the patches is hidden (MAE's argsort of uniform
    noise: exactly ``round(N * (1 - mask_ratio))`` stay visible); the encoder, a densevit
    :class:`VisionTransformer`, sees only the visible patch tokens, each with the position
    code of its place on the full grid (:meth:`VisionTransformer.encode` with ``keep``:
    every position-embedding type and placement, the relative bias included); the
    decoder fills the masked places with a mask token and predicts all pixels; the
    loss is the mean squared error on the masked patches (:class:`MAEPretrainHead`,
    optionally on per-patch normalised pixels).

    Checkpoint keys: ``backbone.*`` (the encoder: exactly a ViT's state dict),
    ``neck.*`` (the decoder, :class:`MAEPretrainDecoder`: ``neck.mask_token``,
    ``neck.pos_embed.*``, ``neck.blocks.*``...), and nothing under ``head.`` (the head
    has no parameters).

    Args:
        backbone (dict): a ``VisionTransformer`` config.
        neck (dict): a ``MAEPretrainDecoder`` config; ``in_channels``, ``patch_size``,
            ``num_patches_hw`` and ``num_extra_tokens`` are filled in from the backbone.
        head (dict): a ``MAEPretrainHead`` config (``patch_size`` filled in).
        mask_ratio (float): fraction of patches hidden per image, in (0, 1) (MAE: 0.75).
        val_seed (int): seed of the evaluation masks (see :class:`MaskedImageModel`).
        xavier_init (bool): initialise the encoder as MAE's code does (Xavier-uniform
            Linear weights and patch projection, zero biases) instead of the ViT's
            truncated N(0, 0.02); not when the backbone loads a checkpoint (``init_cfg``).
        data_preprocessor (dict): e.g. ``dict(type='ImgDataPreprocessor', mean=...,
            std=..., bgr_to_rgb=True)``; every image of a batch the same size.

    Modes:
        'loss': ``dict(loss_rec=...)``.
        'tensor': ``dict(pred=[B, N, P*P*C], mask=[B, N] bool (True: hidden),
            keep=[B, n] long)``.
        'predict': each DataSample gets ``pretrain_loss`` (the image's loss on its
            masked patches), ``recon_pixels`` [C, H, W] (visible patches of the input
            with the reconstructed masked ones, in the normalised input space; see
            :meth:`MAEPretrainHead.reconstruct`) and ``patch_mask`` [h, w] bool.
    """

    def __init__(self, backbone, neck, head, mask_ratio=0.75, val_seed=0, xavier_init=False,
                 data_preprocessor=None, init_cfg=None):
        super().__init__(backbone, mask_ratio, val_seed, data_preprocessor, init_cfg)
        self.xavier_init = xavier_init
        vit = self.backbone
        neck = dict(neck)
        for key, value in dict(in_channels=vit.embed_dims, patch_size=self.pixel_patch,
                               num_patches_hw=vit.grid_hw,
                               num_extra_tokens=vit.num_extra_tokens).items():
            neck.setdefault(key, value)
        self.neck = MODELS.build(neck)
        self.head = MODELS.build(dict(dict(head), patch_size=self.pixel_patch))

    def init_weights(self):
        super().init_weights()
        if not self.xavier_init or self.backbone.init_cfg is not None:
            return
        for m in self.backbone.modules():
            init_linear_or_norm(m, xavier=True)
        proj = self.backbone.patch_embed.proj  # as a Linear from the flattened patch
        nn.init.xavier_uniform_(proj.weight.view(proj.weight.shape[0], -1))
        if proj.bias is not None:
            nn.init.zeros_(proj.bias)

    def draw(self, batch, num_patches, generator):
        return dict(noise=torch.rand(batch, num_patches, generator=generator))

    def run(self, inputs, tokens, hw, draws):
        keep, mask = noise_masking(draws['noise'], num_kept(hw[0] * hw[1], self.mask_ratio))
        latent = self.backbone.encode(tokens, hw, keep)
        return dict(pred=self.neck(latent, keep, hw), mask=mask, keep=keep)

    def loss(self, out, inputs):
        return dict(loss_rec=self.head.loss(out['pred'], inputs, out['mask']))

    def predict(self, out, inputs, data_samples):
        losses = self.head.per_image_loss(out['pred'], inputs, out['mask'])
        recon = self.head.reconstruct(out['pred'], inputs, out['mask'])
        return self.annotate(data_samples, inputs, out['mask'], pretrain_loss=losses,
                             recon_pixels=recon)
