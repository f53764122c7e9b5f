# whole_128.py with lr 2e-3 for every parameter (no head lr x10).
_base_ = ['./whole_128.py']

optim_wrapper = dict(optimizer=dict(lr=2e-3),
                     paramwise_cfg=dict(custom_keys={'head': dict(lr_mult=1.)}))
