# SegFormer-B0 (Xie et al. 2021): Mix Transformer encoder, all-MLP decoder, as
# MMSegmentation's configs/_base_/models/segformer_mit-b0.py builds it: its decode head
# projects each level with conv-BN-ReLU (proj_type='conv_norm_act'), so MMSegmentation's
# zoo checkpoints load. The paper's / official NVlabs / Hugging Face head projects with a
# plain Linear: proj_type='linear' (--cfg-options model.decode_head.proj_type=linear).
# LayerNorm eps 1e-6 everywhere, as MMSegmentation's MiT (HF uses 1e-5, the official
# code a mix: MixVisionTransformer.layer_norm_eps); a checkpoint never changes it, and one
# WARNING line names a file whose origin used another. The final config sets num_classes,
# the preprocessor's size and the pretrained weights.
# Preprocessor and whole-image test: seg_encoder_decoder.py.
_base_ = ['./seg_encoder_decoder.py']

model = dict(
    backbone=dict(type='MixVisionTransformer', arch='b0', drop_path_rate=0.1, layer_norm_eps=1e-6),
    decode_head=dict(
        type='SegformerHead', proj_type='conv_norm_act', in_channels=[32, 64, 160, 256],
        in_index=[0, 1, 2, 3], channels=256, dropout_ratio=0.1, num_classes=19,
        norm_cfg=_base_.norm_cfg, align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', loss_weight=1.0)))
