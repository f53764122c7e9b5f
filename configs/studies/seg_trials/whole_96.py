# whole_128.py at 96x96 with shapes 18-48 px (the quickstart's data, same folder).
_base_ = ['./whole_128.py']

data_root = 'data/shapes_seg96/'
small = dict(img_size=(96, 96), min_size=18, max_size=48)
test_pipeline = [dict(step, scale=small['img_size']) if step['type'] == 'Resize' else step
                 for step in _base_.test_pipeline]
train_dataloader = dict(dataset=dict(data_root=data_root, generate=small))
val_dataloader = dict(dataset=dict(data_root=data_root, generate=small, pipeline=test_pipeline))
test_dataloader = val_dataloader
