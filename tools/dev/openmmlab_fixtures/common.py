"""Shared by the fixture scripts: import MMSegmentation / MMDetection without compiled ops,
randomise a reference model, and save it as mmengine saves a model.

Run only in the reference environment (``setup_venv.sh``), through ``make_all.sh``,
which puts the repository (densevit) and this folder on ``PYTHONPATH``.

Each fixture is two files in ``tests/checkpoint/fixtures/``:

- ``NAME.pth``: the checkpoint exactly as mmengine's ``Runner.save_checkpoint``
  writes it for a model (``{'meta': {...}, 'state_dict': ...}``), nothing else;
- ``NAME_io.pth``: ``{'inputs': {...}, 'outputs': {...}, 'about': str}``, tensors
  only, the reference model's outputs (eval mode) on the inputs.
"""
import importlib.machinery
import sys
import time
import types
from collections import OrderedDict
from pathlib import Path

import torch

FIXTURES = Path(__file__).resolve().parents[3] / 'tests' / 'checkpoint' / 'fixtures'


class _NoCompiledOps(types.ModuleType):
    """Stands in for ``mmcv._ext`` (absent from mmcv-lite) so ``mmcv.ops`` imports.

    The CPU code paths used here (e.g. ``MultiScaleDeformableAttention`` on CPU
    tensors) are pure PyTorch and never call a compiled op; if one were called,
    it raises.
    """

    def __getattr__(self, name):
        if name.startswith('__'):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise RuntimeError(f'compiled mmcv op {name} is not available in mmcv-lite')
        return missing


def import_openmmlab():
    """Import mmseg and mmdet with their modules registered; returns (mmseg, mmdet)."""
    stand_in = _NoCompiledOps('mmcv._ext')
    # a spec without a loader: mmengine's mmcv_full_available() asks for one, and finds none
    stand_in.__spec__ = importlib.machinery.ModuleSpec('mmcv._ext', None)
    sys.modules.setdefault('mmcv._ext', stand_in)
    import mmdet
    import mmseg
    from mmdet.utils import register_all_modules as register_mmdet
    from mmseg.utils import register_all_modules as register_mmseg
    register_mmseg(init_default_scope=False)
    register_mmdet(init_default_scope=False)
    return mmseg, mmdet


def build(scope, cfg):
    """Build ``cfg`` (a dict) from the ``scope`` ('mmseg' / 'mmdet') model registry, eval mode."""
    from mmengine.registry import DefaultScope
    if scope == 'mmseg':
        from mmseg.registry import MODELS
    else:
        from mmdet.registry import MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(cfg)
    model.eval()  # not returned: some modules (mmdet's ResNet) return None from train()
    return model


def save_like_mmengine(model, name, cfg, scope, dataset_meta=None):
    """Write ``NAME.pth`` as mmengine's Runner does for a model-only checkpoint.

    ``meta`` carries what mmengine puts there (``cfg`` as text, ``seed``,
    ``experiment_name``, ``time``, ``mmengine_version``, ``dataset_meta``) plus
    the library's version, as the zoo files carry it.
    """
    import mmengine
    from mmengine.config import Config
    version = __import__(scope).__version__
    cfg_text = Config(dict(default_scope=scope, model=cfg)).pretty_text
    meta = dict(cfg=cfg_text, seed=0, experiment_name=name,
                time=time.strftime('%Y%m%d_%H%M%S'), mmengine_version=mmengine.__version__,
                dataset_meta=dataset_meta or {}, **{f'{scope}_version': version})
    state_dict = OrderedDict((k, v.detach().cpu().clone()) for k, v in model.state_dict().items())
    FIXTURES.mkdir(parents=True, exist_ok=True)
    path = FIXTURES / f'{name}.pth'
    torch.save(dict(meta=meta, state_dict=state_dict), path)
    return path


def save_io(name, inputs, outputs, about):
    """Write ``NAME_io.pth``: inputs and the reference outputs (tensors, nested dicts/lists)."""
    def detach(x):
        if torch.is_tensor(x):
            return x.detach().cpu().clone()
        if isinstance(x, dict):
            return {k: detach(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [detach(v) for v in x]
        return x
    path = FIXTURES / f'{name}_io.pth'
    torch.save(dict(inputs=detach(inputs), outputs=detach(outputs), about=about), path)
    kb = (path.stat().st_size + (FIXTURES / f'{name}.pth').stat().st_size) / 1024
    print(f'{name}: {kb:.0f} KB')
    return path


def seg_samples(x, img_shapes, ori_shapes, labels=None):
    """mmseg ``SegDataSample``s of a zero-padded batch ``x`` [B, 3, H, W], as its test
    pipeline and data preprocessor leave them: ``img_shape`` (each image's own size, at the
    top left), ``pad_shape`` (the batch's), ``padding_size`` (left, right, top, bottom),
    ``ori_shape``; with ``labels`` [B, H, W] also ``gt_sem_seg`` (for ``model.loss``)."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    H, W = x.shape[-2:]
    samples = []
    for i, ((h, w), ori) in enumerate(zip(img_shapes.tolist(), ori_shapes.tolist(),
                                          strict=True)):
        sample = SegDataSample(metainfo=dict(
            img_shape=(h, w), ori_shape=tuple(ori), pad_shape=(H, W),
            padding_size=[0, W - w, 0, H - h]))
        if labels is not None:
            sample.gt_sem_seg = PixelData(data=labels[i][None])
        samples.append(sample)
    return samples


@torch.no_grad()
def seg_outputs(model, x, samples):
    """An mmseg segmentor's outputs on ``x`` (eval mode): ``backbone`` maps, ``decode``
    logits, ``aux`` logits of a single auxiliary head (when it has one), and ``predict``'s
    per-image ``seg_logits`` / ``pred_sem_seg`` for ``samples`` (:func:`seg_samples`)."""
    feats = model.backbone(x)
    preds = model.predict(x, samples)
    out = dict(backbone=list(feats), decode=model.decode_head(feats),
               seg_logits=[p.seg_logits.data for p in preds],
               pred_sem_seg=[p.pred_sem_seg.data for p in preds])
    if model.with_auxiliary_head:
        out['aux'] = model.auxiliary_head(feats)
    return out


def versions():
    """The reference environment's versions, for the ``about`` text."""
    import mmcv
    import mmdet
    import mmengine
    import mmseg
    return (f'torch {torch.__version__}, mmengine {mmengine.__version__}, mmcv-lite '
            f'{mmcv.__version__}, mmsegmentation {mmseg.__version__}, mmdet {mmdet.__version__}')
