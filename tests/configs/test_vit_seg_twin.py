"""configs/quickstart/vit_seg_shapes.py, the segmentation twin of the DETR-ViT quickstart, and
its position-embedding study configs/studies/vit_pe_seg/: the same ViT as the detection
quickstart at 96x96, the same study rows, a forward at 96x96 and a few training iterations
on tiny generated data."""
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from densevit.registry import MODELS

from tiny_run import isolated, load_tool, tiny_seg_data, unique_names

CONFIGS = Path(__file__).resolve().parents[2] / 'configs'
TWIN = CONFIGS / 'quickstart' / 'vit_seg_shapes.py'
DET_STUDY, SEG_STUDY = CONFIGS / 'studies' / 'vit_pe', CONFIGS / 'studies' / 'vit_pe_seg'


def test_the_twin_has_the_detection_quickstarts_vit_at_96():
    twin, det = Config.fromfile(str(TWIN)), Config.fromfile(str(CONFIGS / 'quickstart' /
                                                                  'detr_vit_shapes.py'))
    assert twin.model.backbone.to_dict() == dict(det.model.backbone.to_dict(), img_size=96)
    assert twin.img_size == 96 and twin.train_dataloader.dataset.type == 'ShapesSegDataset'
    assert twin.val_evaluator == dict(type='IoUMetric', iou_metrics=['mIoU'])
    assert twin.model.decode_head.type == 'SETRUPHead' and twin.model.decode_head.num_convs == 1


def test_the_seg_study_mirrors_the_detection_study_row_for_row():
    det = {p.name.split('_pe-')[1]: p for p in DET_STUDY.glob('*.py')}
    seg = {p.name.split('_pe-')[1]: p for p in SEG_STUDY.glob('*.py')}
    assert seg.keys() == det.keys() and len(seg) == 15  # 13 of the paper + 2 RoPE variants
    twin = Config.fromfile(str(TWIN)).to_dict()
    for row, path in seg.items():
        cfg = Config.fromfile(str(path)).to_dict()
        pos_embed = cfg['model']['backbone'].pop('pos_embed')
        assert pos_embed == Config.fromfile(str(det[row])).model.backbone.pos_embed, row
        assert cfg == twin, f'{path.name} changes more than model.backbone.pos_embed'
        assert 'vit_seg_shapes.py' in path.read_text().split('\n_base_')[0]


def test_the_twin_predicts_96x96_maps():
    cfg = Config.fromfile(str(TWIN))
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model).eval()
    x = torch.randn(2, 3, 96, 96)
    assert model.extract_feat(x)[0].shape == (2, 128, 12, 12)  # 8x8 patches: 12x12 tokens
    with torch.no_grad():
        assert model(x, mode='tensor').shape == (2, 4, 48, 48)  # SETR-Naive: x4
        samples = model.predict(x)
    assert samples[0].pred_sem_seg.data.shape == (1, 96, 96)


def test_the_twin_trains_three_iterations_on_tiny_data(tmp_path):
    """tools/train.py with the twin's data, pipeline, optimizer and metric, shrunk."""
    config = tmp_path / 'twin_tiny.py'
    config.write_text(f"_base_ = [{str(TWIN)!r}]\n"
                      + tiny_seg_data(tmp_path / 'shapes_seg96', 96, 18, 48)
                      + 'train_cfg = dict(max_iters=3, val_interval=3)\n')
    with isolated():
        assert load_tool('tools/train.py').main(
            [str(config), '--work-dir', str(tmp_path / 'work'), '--cfg-options', *unique_names()]) == 0
    assert (tmp_path / 'work' / 'iter_3.pth').is_file()
