"""configs/mask2former/mask2former_vit_shapes_panoptic.py: the recipe (its parts, a train step,
the three outputs), and four iterations through tools/train.py then tools/test.py on tiny
generated panoptic shapes with all three evaluators."""
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.structures import PixelData

from densevit.registry import MODELS
from densevit.structures import DataSample

from tiny_run import isolated, load_tool, unique_names

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
RECIPE = CONFIGS / 'mask2former' / 'mask2former_vit_shapes_panoptic.py'
EOMT = CONFIGS / 'eomt' / 'eomt_vit_shapes_panoptic.py'


def panoptic_batch(n, size):
    samples = []
    for i in range(n):
        ids = torch.full((size, size), 3 + i % 3, dtype=torch.long)  # a stuff band
        ids[20:60, 30:80] = 1000  # circle 1
        ids[70:100, 10:40] = 1 + 2000 * (i + 1)  # a rectangle
        samples.append(DataSample(gt_panoptic_seg=PixelData(data=ids[None]),
                                  metainfo=dict(img_shape=(size, size), ori_shape=(size, size))))
    images = [torch.randint(0, 256, (3, size, size), dtype=torch.uint8) for _ in range(n)]
    return dict(inputs=images, data_samples=samples)


def test_recipe_mirrors_eomt_trains_a_step_and_predicts():
    cfg, eomt = Config.fromfile(str(RECIPE)), Config.fromfile(str(EOMT))
    for key in ('train_dataloader', 'val_evaluator', 'train_cfg', 'param_scheduler'):
        assert cfg[key] == eomt[key], key
    assert dict(type='MaskAnnealingHook') not in cfg.custom_hooks
    assert cfg.model.backbone == eomt.model.backbone  # the quickstart ViT/8, no class token
    assert cfg.model.neck.scale_factors == (2.0, 1.0, 0.5, 0.25)  # strides 4, 8, 16, 32
    head = cfg.model.decode_head
    assert (head.embed_dims, head.num_layers, head.num_queries) == (128, 6, 20)
    header = RECIPE.read_text().split('\n_base_')[0]
    # From scratch is not measured; the header must say so and point at the MAE-started numbers.
    assert 'From scratch not measured' in header and 'docs/mask2former.md' in header
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model)
        model.init_weights()
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    before = [p.detach().clone() for p in model.parameters()]
    log = model.train_step(panoptic_batch(2, 128), optim)
    assert torch.isfinite(log['loss'])
    assert {'loss_cls', 'd0.loss_mask', 'd5.loss_dice'} <= set(log) and 'd6.loss_cls' not in log
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    out = model.val_step(panoptic_batch(1, 128))[0]
    assert out.pred_sem_seg.data.shape == out.pred_panoptic_seg.sem_seg.shape == (1, 128, 128)
    assert out.pred_instances.masks.shape[1:] == (128, 128)


def tiny_config(tmp_path):
    """The recipe on four generated 64 x 64 images per split under ``tmp_path`` (its
    evaluators' files moved there too), batches of 2 in this process."""
    cfg = Config.fromfile(str(RECIPE))
    root = str(tmp_path / 'shapes_panoptic') + '/'
    for metric in cfg.val_evaluator:
        for key in ('ann_file', 'seg_prefix'):
            if key in metric:
                metric[key] = metric[key].replace(cfg.data_root, root)
    cfg.test_evaluator = cfg.val_evaluator
    tiny = dict(img_size=(64, 64), max_objects=2, min_size=16, max_size=32, num_images=4)
    for split, seed in (('train', 0), ('val', 1)):
        loader = cfg[f'{split}_dataloader']
        loader.update(batch_size=2, num_workers=0, persistent_workers=False)
        loader.dataset.update(data_root=root, generate=dict(tiny, seed=seed))
    cfg.test_dataloader = cfg.val_dataloader
    path = tmp_path / 'mask2former_tiny.py'
    cfg.dump(str(path))
    return path


def test_tools_train_then_test(tmp_path):
    config = tiny_config(tmp_path)
    options = ['--cfg-options', 'train_cfg.max_iters=4', 'train_cfg.val_interval=4',
               *unique_names()]
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(config), '--work-dir', str(tmp_path / 'work'), *options]) == 0
    checkpoint = tmp_path / 'work' / 'iter_4.pth'
    assert checkpoint.is_file()
    with isolated():
        assert load_tool('tools/test.py').main(
            [str(config), str(checkpoint), '--work-dir', str(tmp_path / 'test'),
             '--cfg-options', *unique_names()]) == 0
    assert list((tmp_path / 'test').glob('*/*.json'))
