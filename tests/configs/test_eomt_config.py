"""configs/eomt/eomt_vit_shapes_semantic.py through tools/train.py on tiny data with the mask
annealing hook: the probabilities saved with the checkpoints follow the official stagger. (Its
recipe, a train step and prediction at 96x96: tests/configs/test_all_configs.py.)"""
from pathlib import Path

import pytest

from densevit.checkpoint.read import read_checkpoint

from tiny_run import isolated, load_tool, tiny_seg_data, unique_names

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
EOMT = CONFIGS / 'eomt' / 'eomt_vit_shapes_semantic.py'


def test_eomt_trains_with_tools_train_and_anneals(tmp_path):
    """Eight iterations of a tiny EoMT: the stagger over 8 iterations anneals block 0 over
    iterations 2-4 and block 1 over 4-6; the checkpoint after 4 iterations holds the
    probabilities set before the fourth (iteration 3), the last one zeros."""
    config = tmp_path / 'eomt_tiny.py'
    config.write_text(f"_base_ = [{str(EOMT)!r}]\n"
                      + tiny_seg_data(tmp_path / 'shapes_seg', 48, 10, 24) + """
model = dict(num_queries=4, backbone=dict(arch=dict(embed_dims=32, num_layers=3, num_heads=2,
                                                    feedforward_channels=64), img_size=48))
train_cfg = dict(max_iters=8, val_interval=8)
param_scheduler = []
default_hooks = dict(checkpoint=dict(interval=4))
""")
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(config), '--work-dir', str(tmp_path / 'work'), '--cfg-options',
             *unique_names()]) == 0
    probs = [read_checkpoint(tmp_path / 'work' / f'iter_{i}.pth')['attn_mask_probs'].tolist()
             for i in (4, 8)]
    assert probs[0] == pytest.approx([0.5 ** 0.9, 1.0])
    assert probs[1] == [0.0, 0.0]
