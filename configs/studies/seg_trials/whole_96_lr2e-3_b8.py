# whole_96_lr2e-3.py with batch 8 (the quickstart, but decaying over 3,000 iterations).
_base_ = ['./whole_96_lr2e-3.py']

train_dataloader = dict(batch_size=8)
