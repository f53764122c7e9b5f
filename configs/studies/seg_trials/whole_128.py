# previous.py with whole shapes: none cut by the border, none hidden by another.
_base_ = ['./previous.py']

data_root = 'data/shapes_seg_trials/whole_128/'
whole = dict(inside=True, min_visible=1.0)
train_dataloader = dict(dataset=dict(data_root=data_root, generate=whole))
val_dataloader = dict(dataset=dict(data_root=data_root, generate=whole))
test_dataloader = val_dataloader
