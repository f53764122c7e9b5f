"""Visual tokens for BEiT: a k-means codebook over the patch features of a frozen teacher ViT.

BEiT (Bao et al. 2022) predicts, for each masked patch, the id that DALL-E's discrete VAE
gives the patch; that tokenizer is not available here, so the words are made from the same
unlabelled images instead: the patch features of a densevit-trained teacher (e.g. the MAE
quickstart's encoder) at one of its layers, clustered by k-means
(``tools/pretrain/make_tokenizer.py``). A patch's token is the id of the nearest codeword.

The tokenizer file (``torch.save``) holds:

- ``codebook``: [K, D] float, the codewords (unit length when ``meta['normalize']``);
- ``teacher``: the teacher ViT's state dict (its ``VisionTransformer`` keys);
- ``meta``: ``teacher_config`` (the file it came from), ``teacher_checkpoint``, ``layer``,
  ``k``, ``normalize``, ``num_images``, ``image_folder``, ``num_features`` (patches
  clustered), ``iterations``, ``seed``, ``usage`` (share of the codewords that some
  clustered patch is nearest to), ``perplexity`` (of the token distribution).
"""
import os

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule

from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.read import load_checkpoint_safely
from densevit.registry import MODELS


def patch_features(teacher, images):
    """The teacher's output map (its single ``out_indices`` layer) as patch features:
    images [B, 3, H, W] (normalised as the teacher's training input) -> [B, N, D]."""
    (feats,) = teacher(images)
    return feats.flatten(2).transpose(1, 2)


def nearest_codeword(features, codebook, normalize):
    """features [..., D], codebook [K, D] -> [...] long, the nearest codeword's id (squared
    Euclidean distance; with ``normalize`` the features are first scaled to unit length, so
    that it is the codeword of largest cosine for a unit-length codebook)."""
    if normalize:
        features = F.normalize(features, dim=-1)
    flat = features.reshape(-1, features.shape[-1]).float()
    code = codebook.float()
    # |x - c|^2 = |x|^2 - 2 x.c + |c|^2; |x|^2 is the same for every c
    dist = code.pow(2).sum(1)[None] - 2 * flat @ code.t()
    return dist.argmin(1).reshape(features.shape[:-1])


@MODELS.register_module()
class KMeansTokenizer(BaseModule):
    """Patch -> visual token id: the nearest k-means codeword to the patch's feature in a frozen
    teacher ViT (see the module doc).

    The teacher is built from ``teacher`` (a ``VisionTransformer`` config; its output layer
    is ``layer``) and the codebook is [``num_tokens``, D]; both are read from
    ``checkpoint`` when the weights are initialised (not when the model is built, so a
    config builds before the file exists). Without a checkpoint the teacher and codebook
    stay random (for tests). The teacher never trains (``requires_grad`` False, always in
    eval mode).

    Args:
        teacher (dict): the teacher ViT's config (e.g. the MAE quickstart's ``backbone``).
        num_tokens (int): K, set by :class:`BEiT` from its head.
        checkpoint (str, optional): the tokenizer file.
        layer (int): the teacher layer whose output the codebook was made on (-1: the last,
            with the final norm); must be the file's.
        normalize (bool): unit-length features (cosine k-means); must be the file's.

    Raises:
        CheckpointMismatchError (a ValueError, at load; the tools print it as one line): the
        file's codebook size differs from ``num_tokens``, or its width from the teacher's,
        or its layer / normalisation from the config's (each naming both values and the
        file). FileNotFoundError: no file (``tools/train.py``'s preflight names it first).
    """

    def __init__(self, teacher, num_tokens, checkpoint=None, layer=-1, normalize=True,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.teacher = MODELS.build(dict(dict(teacher), out_indices=layer, init_cfg=None))
        self.teacher.requires_grad_(False)
        self.layer = layer
        self.normalize = normalize
        self.checkpoint = checkpoint
        self.register_buffer('codebook', F.normalize(
            torch.randn(num_tokens, self.teacher.embed_dims), dim=1))

    @property
    def num_tokens(self):
        return self.codebook.shape[0]

    def train(self, mode=True):
        super().train(mode)
        self.teacher.eval()  # frozen: no dropout, no drop path
        return self

    def init_weights(self):
        super().init_weights()
        if self.checkpoint is not None:
            self.load_file(self.checkpoint)

    def load_file(self, path):
        """Read a tokenizer file (module doc) into the teacher and the codebook."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f'BEiT tokenizer file not found: {path!r} (make it with '
                                    f'tools/pretrain/make_tokenizer.py)')
        data = load_checkpoint_safely(path)
        meta, codebook = data['meta'], data['codebook']
        K, D = codebook.shape
        if K != self.num_tokens:
            raise CheckpointMismatchError(
                f'{path}: the tokenizer has a codebook of {K} visual tokens but the BEiT head '
                f'predicts {self.num_tokens} (head.num_tokens); make them equal')
        if D != self.teacher.embed_dims:
            raise CheckpointMismatchError(
                f'{path}: the codewords have {D} dimensions but the teacher ViT '
                f'(tokenizer.teacher) is {self.teacher.embed_dims} wide')
        for key, ours in (('layer', self.layer), ('normalize', self.normalize)):
            if meta.get(key) != ours:
                raise CheckpointMismatchError(
                    f'{path}: the codebook was made with {key}={meta.get(key)!r} but '
                    f'tokenizer.{key}={ours!r}')
        try:
            self.teacher.load_state_dict(data['teacher'])
        except RuntimeError as e:
            raise CheckpointMismatchError(f'{path}: its teacher does not fit tokenizer.teacher: '
                                          f'{e}') from None
        self.codebook.copy_(codebook)

    @torch.no_grad()
    def forward(self, images):
        """images [B, 3, H, W] (the model's normalised input) -> token ids [B, N] long."""
        return nearest_codeword(patch_features(self.teacher, images), self.codebook,
                                self.normalize)
