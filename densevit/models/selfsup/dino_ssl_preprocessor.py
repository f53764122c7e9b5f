"""Batching DINO's multi-crop samples: one normalised [B, 3, h, w] tensor per crop."""
import torch
from mmengine.model import ImgDataPreprocessor

from densevit.registry import MODELS


@MODELS.register_module()
class MultiCropDataPreprocessor(ImgDataPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` (``mean``, ``std``, ``bgr_to_rgb``) for samples whose
    ``inputs`` is a list of crops (``PackMultiCropInputs``; mmengine's ``pseudo_collate`` makes
    the batch's ``inputs`` a list of crop i of every image): crop i of every image is stacked
    into one float [B, 3, h_i, w_i] batch, channels converted and normalised as the
    ``ImgDataPreprocessor`` does. Returns ``dict(inputs=[crop 0 batch, crop 1 batch, ...],
    data_samples=...)``. Crop i must have one size over the batch (DINOMultiCrop makes it so);
    no padding."""

    def forward(self, data, training=False):
        data = self.cast_data(data)
        batches = []
        # mmengine's pseudo_collate transposes each sample's list of crops: inputs[i] is the
        # list of every image's crop i
        for i, crops in enumerate(data['inputs']):
            sizes = {tuple(c.shape[-2:]) for c in crops}
            if len(sizes) != 1:
                raise ValueError(f'MultiCropDataPreprocessor: crop {i} has several sizes in one '
                                 f'batch: {sorted(sizes)}')
            x = torch.stack(list(crops)).float()
            if self._channel_conversion:
                x = x[:, [2, 1, 0]]
            if self._enable_normalize:
                x = (x - self.mean) / self.std
            batches.append(x)
        return dict(inputs=batches, data_samples=data.get('data_samples'))
