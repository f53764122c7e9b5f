"""Batch preparation for detectors: float, normalize, pad, record shapes."""
from densevit.registry import MODELS

from .token_limit import TokenLimitedPreprocessor


@MODELS.register_module()
class DetDataPreprocessor(TokenLimitedPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` plus detection metainfo.

    Pads every image at the bottom/right to the batch's largest size rounded up to
    ``pad_size_divisor`` (set it to the backbone's patch size or stride), so boxes in
    pixels of ``img_shape`` stay valid; records ``batch_input_shape`` and
    ``pad_shape`` (h, w) in each DataSample for padding masks. An image of more than
    ``max_tokens`` patches of ``patch_size`` pixels is refused first, naming its file
    (``token_limit.py``).

    Input: ``dict(inputs=list of uint8 [C, H_i, W_i], data_samples=list of DataSample)``.
    Output: ``dict(inputs=float [B, C, H, W], data_samples=...)``.
    """

    def forward(self, data, training=False):
        data = super().forward(data, training)
        inputs, data_samples = data['inputs'], data.get('data_samples')
        if data_samples is not None:
            batch_input_shape = tuple(inputs.shape[-2:])
            for ds in data_samples:
                ds.set_metainfo(dict(batch_input_shape=batch_input_shape,
                                     pad_shape=batch_input_shape))
        return data
