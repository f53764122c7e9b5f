# Position embedding 'rope' in DINOv3's convention on the segmentation twin vit_seg_shapes.py
# (mIoU): patch centres in [-1, 1], theta 100, the two halves of each head rotated (class /
# register tokens never); no parameters. A row of its own beside EVA-02's convention
# (vit_seg_shapes_pe-rope-every_layer.py): DINOv3's backbones use it, and its coordinates do not
# grow with the grid.
#   python tools/train.py configs/studies/vit_pe_seg/vit_seg_shapes_pe-rope_dinov3-every_layer.py
_base_ = ['../../quickstart/vit_seg_shapes.py']

model = dict(backbone=dict(pos_embed=dict(type='rope', placement='every_layer',
                                          convention='dinov3')))
