# whole_128.py plus an auxiliary head on stage 4 (loss weight 0.4).
_base_ = ['./whole_128.py']

model = dict(auxiliary_head=dict(
    type='SETRUPHead', norm_layer=None, in_channels=256, channels=128, in_index=3,
    num_convs=1, up_scale=1, kernel_size=3, num_classes=4, dropout_ratio=0.0,
    norm_cfg=dict(type='BN', requires_grad=True),
    loss_decode=dict(type='CrossEntropyLoss', loss_weight=0.4)))
