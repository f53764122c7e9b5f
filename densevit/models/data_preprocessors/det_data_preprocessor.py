"""Batch preparation for detectors: float, normalize, pad, record shapes."""
from mmengine.model import ImgDataPreprocessor

from densevit.registry import MODELS


@MODELS.register_module()
class DetDataPreprocessor(ImgDataPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` plus detection metainfo.

    Pads every image at the bottom/right to the batch's largest size rounded up to
    ``pad_size_divisor`` (set it to the backbone's patch size or stride), so boxes in
    pixels of ``img_shape`` stay valid; records ``batch_input_shape`` and
    ``pad_shape`` (h, w) in each DataSample for padding masks.

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
