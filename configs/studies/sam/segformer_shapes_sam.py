# Study: sharpness-aware minimisation (SAM, Foret et al. 2021; "When Vision Transformers
# Outperform ResNets without Pre-training or Strong Data Augmentations", Chen et al. 2022) on
# the segmentation quickstart (configs/quickstart/segformer_shapes.py), everything else the
# quickstart's: each iteration steps AdamW with the gradient taken at w + rho * g / ||g||
# (densevit/engine/sam_optim_wrapper.py), two forward-backward passes per iteration.
#   python tools/run_seeds.py configs/studies/sam/segformer_shapes_sam.py \
#       --name segformer_shapes_sam_1thread --threads 1
# against the quickstart's own seeds with the same threads:
#   python tools/run_seeds.py configs/quickstart/segformer_shapes.py \
#       --name quickstart_segformer_1thread --threads 1
_base_ = ['../../quickstart/segformer_shapes.py']

# rho 0.05: SAM's value for the ViTs of Chen et al. (0.05-0.2 by model size; the smallest for
# the smallest); no clipping, as the quickstart
optim_wrapper = dict(type='SAMOptimWrapper', rho=0.05)
