# ViT paper App. D.4 study on the segmentation twin: position embedding 'relative'
# (learned per-head bias for each 2D query-key offset, added to the attention logits),
# in every layer's attention, one shared table.
# Everything else is configs/quickstart/vit_seg_shapes.py (parent: the ViT + SETR-Naive
# segmentation twin of the detection study, mIoU on the shapes class maps).
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-relative-every_layer_shared.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='relative', placement='every_layer_shared')))
