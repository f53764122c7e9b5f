# SETR's ADE20K recipe: schedule_160k.py (160k iterations, poly decay, power 0.9) with
# SGD 0.001, momentum 0.9, no weight decay, heads at lr x10.
_base_ = ['./schedule_160k.py']

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.001, momentum=0.9, weight_decay=0.0),
    paramwise_cfg=dict(custom_keys={'head': dict(lr_mult=10.)}))
