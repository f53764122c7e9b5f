"""Build a model from a config and predict on images, without a Runner.

    from densevit.apis import inference, init_model
    model = init_model('configs/quickstart/detr_vit_shapes.py',
                       'work_dirs/detr_vit_shapes/iter_800.pth')
    result = inference(model, 'data/shapes/val/000000.png')  # .pred_instances / .pred_sem_seg
"""
import copy
import os

import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import Compose, pseudo_collate
from mmengine.registry import DefaultScope, init_default_scope

import densevit  # noqa: F401  (checkpoint allow-list, safe loader)
from densevit.checkpoint.model import load_model_weights
from densevit.checkpoint.read import load_checkpoint_safely
from densevit.engine.sync_bn import revert_sync_bn_if_single
from densevit.registry import DATASETS, MODELS
from densevit.utils.precision import autocast_context, check_precision

_LOADERS = ('LoadImage', 'LoadImageFromFile', 'mmcv.LoadImageFromFile')


def _dataset_meta(cfg, checkpoint):
    """Class names / palette: the checkpoint's record of its training data, else the config's."""
    meta = (checkpoint or {}).get('meta', {}).get('dataset_meta')
    if meta:
        return dict(meta)
    for key in ('test_dataloader', 'val_dataloader', 'train_dataloader'):
        dataset = (cfg.get(key) or {}).get('dataset') or {}
        if dataset.get('metainfo'):
            return dict(dataset['metainfo'])
        dataset_cls = DATASETS.get(dataset.get('type', '')) if dataset.get('type') else None
        if dataset_cls is not None and getattr(dataset_cls, 'METAINFO', None):
            return copy.deepcopy(dict(dataset_cls.METAINFO))
    return None


def init_model(config, checkpoint=None, device='cpu', cfg_options=None, precision='fp32'):
    """A model ready for :func:`inference`: built, weights loaded, in eval mode.

    Args:
        config (str | Path | Config): config file or object.
        checkpoint (str, optional): weights (read with ``weights_only=True``); None
            leaves the random initialisation.
        device (str): 'cpu', 'cuda', 'cuda:1'...
        cfg_options (dict, optional): overrides, as ``--cfg-options`` (dotted keys).
        precision (str): 'fp32', or 'bf16': :func:`inference` predicts under bf16
            autocast (weights stay float32; see ``densevit/utils/precision.py``).

    Returns:
        nn.Module: with ``cfg`` (the config), ``dataset_meta`` (class names...) and
        ``precision`` attributes. SyncBN layers are plain BN (one process).
    """
    check_precision(precision, 'init_model')
    cfg = Config.fromfile(str(config)) if isinstance(config, (str, os.PathLike)) else config
    cfg = copy.deepcopy(cfg)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(cfg.get('default_scope', 'densevit'))
    model_cfg = copy.deepcopy(cfg.model)
    # pretrained backbone weights are superseded by the checkpoint: don't read them
    if checkpoint is not None and isinstance(model_cfg.get('backbone'), dict):
        model_cfg.backbone.pop('init_cfg', None)
    model = MODELS.build(model_cfg)
    model = revert_sync_bn_if_single(model)
    ckpt = None
    if checkpoint is not None:
        ckpt = load_checkpoint_safely(checkpoint, map_location='cpu')
        # another layout (MMSegmentation / MMDetection / official / HF) is converted
        load_model_weights(model, ckpt, str(checkpoint), strict=True)
    model.cfg = cfg
    model.dataset_meta = _dataset_meta(cfg, ckpt)
    model.precision = precision
    return model.to(device).eval()


def split_test_pipeline(cfg):
    """(load transform or None, Compose of the rest) of the config's test pipeline, with
    annotation loading removed (there are none at inference)."""
    dataset = (cfg.get('test_dataloader') or cfg.get('val_dataloader'))['dataset']
    steps = copy.deepcopy(dataset.get('pipeline') or cfg.get('test_pipeline'))
    steps = [s for s in steps if 'Annotation' not in s['type']]
    load = None
    if steps and steps[0]['type'] in _LOADERS:
        load = Compose([steps.pop(0)])
    return load, Compose(steps)


def as_bgr_uint8(img):
    """An image array as ``H x W x 3`` uint8 BGR, the form the test pipeline expects.

    Accepted: ``H x W`` and ``H x W x 1`` grayscale (repeated to 3 channels),
    ``H x W x 3`` BGR, ``H x W x 4`` BGRA (alpha dropped); uint8 0..255, or float
    0..1 (scaled by 255 and rounded). Anything else raises ``ValueError`` saying
    what was given: float values outside 0..1 are refused rather than guessed at.
    """
    if img.ndim == 2:
        img = img[..., None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f'inference: expected an H x W, H x W x 1 (gray), H x W x 3 (BGR) or '
                         f'H x W x 4 (BGRA) array, got shape {tuple(img.shape)}')
    if img.dtype.kind == 'f':
        lo, hi = (float(img.min()), float(img.max())) if img.size else (0.0, 0.0)
        if lo < 0 or hi > 1 or not np.isfinite(img).all():
            raise ValueError(f'inference: float images must hold values in 0..1 (got '
                             f'{lo:g}..{hi:g}); pass uint8 0..255 pixel values instead')
        img = np.rint(img * 255).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ValueError(f'inference: expected uint8 (0..255) or float (0..1) pixels, '
                         f'got {img.dtype}')
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return np.ascontiguousarray(img[..., :3])


def _prepare(item, load, rest):
    if isinstance(item, np.ndarray):
        img = as_bgr_uint8(item)
        results = dict(img=img, img_shape=img.shape[:2], ori_shape=img.shape[:2])
    else:
        if load is None:
            raise ValueError('the test pipeline has no image-loading step: pass arrays')
        path = os.fspath(item)
        if os.path.isdir(path):
            raise IsADirectoryError(
                f'inference: {path} is a folder; inference() takes an image (a file path or an '
                f"array) or a list of them: pass the folder's files, e.g. inference(model, "
                f"sorted(glob.glob('{path}/*.png'))), or draw them all with tools/demo.py "
                f'{path} CONFIG CHECKPOINT --out-dir OUT')
        results = load(dict(img_path=path))
    return rest(results)


def inference(model, images, batch_size=1, precision=None):
    """Predict on one image or several.

    Args:
        model: from :func:`init_model`.
        images (str | Path | np.ndarray | list): a file path or array, or a list
            of them (a folder is refused, saying how to pass its files). Arrays are
            **BGR** (as ``cv2.imread`` gives) ``H x W x 3``, or BGRA ``H x W x 4``, or
            grayscale ``H x W`` / ``H x W x 1``; uint8 0..255 or float 0..1 (see
            :func:`as_bgr_uint8`).
        batch_size (int): images per ``test_step``; images of different sizes in one
            batch are predicted in groups of one size (``densevit/models/size_groups.py``),
            so the batch size does not change the predictions.
        precision (str, optional): 'fp32' or 'bf16' (autocast); default the model's
            ``precision`` from :func:`init_model` ('fp32' if it has none).

    Returns:
        DataSample or list[DataSample]: ``pred_instances`` (``bboxes`` xyxy in
        original-image pixels, ``scores``, ``labels``) for detectors,
        ``pred_sem_seg`` (and ``seg_logits``) for segmentors; one per input, a
        single one for a single input.
    """
    single = not isinstance(images, (list, tuple))
    items = [images] if single else list(images)
    precision = check_precision(precision or getattr(model, 'precision', 'fp32'), 'inference')
    device = next(model.parameters()).device.type
    scope = model.cfg.get('default_scope', 'densevit')
    with DefaultScope.overwrite_default_scope(scope):
        load, rest = split_test_pipeline(model.cfg)
        results = []
        for start in range(0, len(items), batch_size):
            batch = [_prepare(x, load, rest) for x in items[start:start + batch_size]]
            with torch.no_grad(), autocast_context(precision, device):
                results += model.test_step(pseudo_collate(batch))
    return results[0] if single else results
