# whole_96_lr1e-3.py with lr 4e-3.
_base_ = ['./whole_96_lr1e-3.py']

optim_wrapper = dict(optimizer=dict(lr=4e-3))
