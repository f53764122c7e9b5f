"""Which heads test-time augmentation can merge, and the default TTA config.

A head declares what its views give to merge with a class attribute ``tta_merge``:
``'seg_logits'`` (``DecodeHead`` and its subclasses: per-pixel logits at the original
size, merged by ``SegTTAModel``) or ``'boxes'`` (``DETRHead``, ``DeformableDETRHead``:
boxes in pixels of the original image, merged by ``DetTTAModel``). A head without it
cannot be used with ``tools/test.py --tta``.
"""
import copy

from densevit.registry import MODELS

TTA_MODELS = {'seg_logits': 'SegTTAModel', 'boxes': 'DetTTAModel'}
HEAD_KEYS = {'decode_head': 'seg_logits', 'bbox_head': 'boxes'}
# MMSegmentation's img_ratios (configs/_base_/datasets/*.py tta_pipeline)
SEG_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
# MMDetection's TTA scales (1333, 800), (666, 400), (2000, 1200) as ratios of the test scale
DET_RATIOS = (0.5, 1.0, 1.5)
DET_TTA_CFG = dict(nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _cannot(where, head, model):
    return ValueError(
        f'test-time augmentation: {head} (the {where} of {model}) cannot merge augmented '
        f"predictions: it declares no tta_merge ('seg_logits' for heads on DecodeHead, "
        f"'boxes' for heads on DETRHead; see densevit/models/tta/support.py)")


def tta_kind(model_cfg):
    """'seg_logits' or 'boxes' for a model config, from its head's class; ValueError
    naming the head when it cannot merge augmented predictions."""
    model = model_cfg.get('type', '?')
    for key, kind in HEAD_KEYS.items():
        head = model_cfg.get(key)
        if head is None:
            continue
        cls = MODELS.get(head['type']) if isinstance(head.get('type'), str) else head['type']
        if cls is None:
            raise ValueError(f'test-time augmentation: {key} type {head["type"]!r} of {model} '
                             'is not registered')
        if getattr(cls, 'tta_merge', None) != kind:
            raise _cannot(key, getattr(cls, '__name__', head['type']), model)
        return kind
    raise ValueError(f'test-time augmentation: model {model} has neither a decode_head nor '
                     'a bbox_head whose predictions could be merged')


def check_head(model, who):
    """The built model's head must merge what ``who`` (a TTA model class name) merges."""
    for key, kind in HEAD_KEYS.items():
        head = getattr(model, key, None)
        if head is not None:
            if getattr(head, 'tta_merge', None) != kind or TTA_MODELS[kind] != who:
                raise _cannot(key, type(head).__name__, type(model).__name__)
            return
    raise ValueError(f'{who}: model {type(model).__name__} has neither a decode_head nor a '
                     'bbox_head whose predictions could be merged')


def scaled_resize(resize, ratio):
    """The test pipeline's ``Resize`` at ``ratio`` times its scale; without one, a
    ``Resize(scale_factor=ratio)`` of the original image (MMSegmentation's rule)."""
    if resize is None:
        return dict(type='Resize', scale_factor=ratio, keep_ratio=True)
    resize = copy.deepcopy(dict(resize))
    if resize.get('scale') is not None:
        scale = resize['scale']
        scale = (scale, scale) if isinstance(scale, (int, float)) else scale
        resize['scale'] = tuple(int(round(s * ratio)) for s in scale)
    else:
        factor = resize.get('scale_factor', 1.0)
        resize['scale_factor'] = (tuple(f * ratio for f in factor)
                                  if isinstance(factor, (tuple, list)) else factor * ratio)
    return resize


def tta_pipeline(test_pipeline, ratios, flip=True):
    """A test pipeline -> its TTA pipeline: image loading, then ``TestTimeAug`` over
    (each ratio's Resize) x (no flip, horizontal flip) x the annotation loaders and the
    remaining steps. Annotations are loaded after the resize and flip, so the ground
    truth stays that of the original image, as in MMSegmentation's ``tta_pipeline``."""
    steps = [copy.deepcopy(dict(s)) for s in test_pipeline]
    names = [s.get('type') for s in steps]
    loads = [i for i, n in enumerate(names) if isinstance(n, str) and n.startswith('LoadImage')]
    if not loads:
        raise ValueError(f'test-time augmentation: the test pipeline has no LoadImage step '
                         f'({names}); give tta_pipeline in the config')
    bad = [n for n in names if n in ('TestTimeAug', 'RandomFlip', 'RandomResize',
                                     'RandomChoiceResize', 'RandomCrop')]
    if bad:
        raise ValueError(f'test-time augmentation: cannot derive a TTA pipeline from a test '
                         f'pipeline with {bad}; give tta_pipeline in the config')
    rest = steps[loads[0] + 1:]
    resizes = [s for s in rest if s['type'] == 'Resize']
    if len(resizes) > 1:
        raise ValueError('test-time augmentation: the test pipeline has several Resize steps; '
                         'give tta_pipeline in the config')
    anns = [s for s in rest if str(s['type']).endswith('Annotations')]
    others = [s for s in rest if s not in resizes and s not in anns]
    if not ratios:
        raise ValueError('test-time augmentation: no scale ratios given')
    groups = [[scaled_resize(resizes[0] if resizes else None, float(r)) for r in ratios]]
    if flip:
        groups.append([dict(type='RandomFlip', prob=0., direction='horizontal'),
                       dict(type='RandomFlip', prob=1., direction='horizontal')])
    groups += [[s] for s in anns + others]
    return steps[:loads[0] + 1] + [dict(type='TestTimeAug', transforms=groups)]


def apply_tta(cfg, ratios=None, flip=None):
    """Turn a test config into its TTA version in place (what ``tools/test.py --tta``
    does, as MMSegmentation / MMDetection do): ``cfg.model`` becomes ``tta_model`` around
    the original model and the test dataset's pipeline becomes ``tta_pipeline``.

    ``tta_model`` / ``tta_pipeline`` come from the config when it has them; otherwise
    the defaults: ``SegTTAModel`` with MMSegmentation's ratios, or ``DetTTAModel``
    (NMS IoU 0.5, 100 boxes) with ratios 0.5, 1, 1.5, both with a horizontal flip.
    ``ratios`` / ``flip`` (command line) rebuild the pipeline from the test pipeline.
    """
    kind = tta_kind(cfg.model)
    dataset = cfg.test_dataloader.dataset
    if 'pipeline' not in dataset:
        raise ValueError('test-time augmentation: test_dataloader.dataset has no pipeline to '
                         'augment (a wrapped dataset?); give its pipeline as tta_pipeline')
    tta_model = copy.deepcopy(cfg.get('tta_model')) or dict(type=TTA_MODELS[kind])
    if kind == 'boxes' and tta_model.get('type') == 'DetTTAModel':
        tta_model.setdefault('tta_cfg', copy.deepcopy(DET_TTA_CFG))
    pipeline = cfg.get('tta_pipeline')
    if pipeline is None or ratios is not None or flip is not None:
        default = SEG_RATIOS if kind == 'seg_logits' else DET_RATIOS
        pipeline = tta_pipeline(dataset.pipeline, ratios or default, True if flip is None else flip)
    dataset.pipeline = pipeline
    tta_model['module'] = cfg.model
    cfg.model = tta_model
    return cfg
