"""DINO self-distillation (DINOSelfDistillation): centering, sharpening, the loss over crop pairs,
the teacher's EMA and schedules, the weight-normalised last layer, multi-crop, and the config
through tools/train.py (with resume) and the attention figure, against hand-computed values."""
import math

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from test_mae_tools import write_images

from densevit.models.selfsup.dino_ssl import (
    cosine_momentum,
    dino_loss_per_image,
    sharpen,
    teacher_temperature,
    updated_center,
)
from densevit.models.selfsup.dino_ssl_head import DINOProjectionHead
from densevit.registry import MODELS, TRANSFORMS

from selfsup_models import PREPROCESSOR, TINY, build
from tiny_run import REPO, isolated, load_tool, scalar_records, unique_names

QUICKSTART = REPO / 'configs' / 'dino_ssl' / 'dino_vit_shapes_quickstart.py'


def tiny_dino(**kwargs):
    cfg = dict(type='DINOSelfDistillation',
               data_preprocessor=dict(PREPROCESSOR, type='MultiCropDataPreprocessor'),
               backbone=dict(type='VisionTransformer', arch=TINY, img_size=32, patch_size=8,
                             with_cls_token=True),
               head=dict(type='DINOProjectionHead', out_channels=6, hidden_channels=16,
                         bottleneck_channels=8),
               momentum=dict(base=0.996, final=1.0, total_steps=10))
    cfg.update(kwargs)
    return cfg


def softmax(row):
    e = [math.exp(v) for v in row]
    return [v / sum(e) for v in e]


# ---- centering and sharpening --------------------------------------------------------------

def test_centering_is_an_ema_of_the_teachers_batch_means_2x3():
    teacher = torch.tensor([[1., 2., 3.], [3., 0., 0.]])
    center = torch.tensor([[0.5, 0., -0.5]])
    # batch mean [2, 1, 1.5]; 0.9 * center + 0.1 * mean
    expected = [[0.9 * 0.5 + 0.1 * 2, 0.9 * 0 + 0.1 * 1, 0.9 * -0.5 + 0.1 * 1.5]]
    assert torch.allclose(updated_center(center, teacher, 0.9), torch.tensor(expected))


def test_sharpening_is_the_softmax_of_the_centred_logits_over_the_temperature_2x3():
    teacher = torch.tensor([[1., 2., 3.], [3., 0., 0.]])
    center = torch.tensor([[0.5, 0., -0.5]])
    # (teacher - center) / 0.5: [1, 4, 7] and [5, 0, 1]
    expected = [softmax([1, 4, 7]), softmax([5, 0, 1])]
    assert torch.allclose(sharpen(teacher, center, 0.5), torch.tensor(expected), atol=1e-7)
    # lower temperature: sharper (the largest entry grows)
    assert sharpen(teacher, center, 0.04)[0, 2] > sharpen(teacher, center, 0.5)[0, 2]


# ---- the loss over crop pairs -----------------------------------------------------------------

def loop_loss(student, teacher_probs, temp):
    """The DINO loss of one image with explicit loops: student [crops][K], teacher [globals][K]."""
    total, pairs = 0.0, 0
    for q, target in enumerate(teacher_probs):
        for v, logits in enumerate(student):
            if v == q:
                continue
            scaled = [x / temp for x in logits]
            log_z = math.log(sum(math.exp(x) for x in scaled))
            total += -sum(t * (x - log_z) for t, x in zip(target, scaled, strict=True))
            pairs += 1
    assert pairs == len(teacher_probs) * (len(student) - 1)
    return total / pairs


def test_loss_over_crop_pairs_skips_same_crop_pairs():
    # 2 images, 2 global crops + 2 local ones, K = 3
    student = [[[0.1, 0.5, -0.2], [1.0, 0.0, 0.3]], [[0.4, -0.1, 0.2], [0.0, 0.2, 0.9]],
               [[-0.3, 0.3, 0.0], [0.5, 0.5, -0.5]], [[0.2, 0.1, 0.7], [-0.4, 0.8, 0.1]]]
    teacher = [[[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], [[0.1, 0.8, 0.1], [0.3, 0.3, 0.4]]]
    got = dino_loss_per_image([torch.tensor(s) for s in student],
                              [torch.tensor(t) for t in teacher], student_temp=0.1)
    for b in range(2):
        ref = loop_loss([s[b] for s in student], [t[b] for t in teacher], 0.1)
        assert got[b].item() == pytest.approx(ref, rel=1e-5)
    # a same-crop pair would have entered: with only the global crops, each is scored
    # against the other only (2 pairs)
    two = dino_loss_per_image([torch.tensor(s) for s in student[:2]],
                              [torch.tensor(t) for t in teacher], 0.1)
    assert two[0].item() == pytest.approx(loop_loss([s[0] for s in student[:2]],
                                                    [t[0] for t in teacher], 0.1), rel=1e-5)


def test_model_loss_centers_sharpens_and_updates_the_center():
    model = build(tiny_dino(teacher_temp=dict(start=0.04, end=0.07, warmup_steps=4)))
    model.train()
    torch.manual_seed(1)
    crops = [torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32), torch.randn(2, 3, 16, 16)]
    model.center.copy_(torch.linspace(-1, 1, 6)[None])
    center = model.center.clone()
    with torch.no_grad():
        out = model(crops, mode='tensor')
        losses = model(crops, mode='loss')
    student = [s.tolist() for s in out['student']]
    teacher = [t.tolist() for t in out['teacher']]
    c = center[0].tolist()
    ref = 0.0
    for b in range(2):  # teacher temperature 0.04 at step 0, centred by the old center
        probs = [softmax([(x - ci) / 0.04 for x, ci in zip(t[b], c, strict=True)]) for t in teacher]
        ref += loop_loss([s[b] for s in student], probs, 0.1) / 2
    assert losses['loss_dino'].item() == pytest.approx(ref, rel=1e-4)
    assert losses['teacher_temp'].item() == pytest.approx(0.04)
    rows = [t[b] for t in teacher for b in range(2)]  # every global crop of every image
    expected = [0.9 * c[k] + 0.1 * sum(r[k] for r in rows) / 4 for k in range(6)]
    assert model.center[0].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


# ---- EMA and schedules ------------------------------------------------------------------------

def test_cosine_momentum_schedule_by_hand():
    assert cosine_momentum(0, 10) == pytest.approx(0.996)
    assert cosine_momentum(5, 10) == pytest.approx(1 - 0.004 * 0.5)  # cos(pi/2) = 0
    # step 2 of 8: 1 + 0.5 * (0.996 - 1) * (1 + cos(pi/4))
    assert cosine_momentum(2, 8) == pytest.approx(1 - 0.002 * (1 + 2 ** -0.5))
    assert cosine_momentum(10, 10) == 1.0 and cosine_momentum(12, 10) == 1.0
    assert cosine_momentum(0, 4, base=0.9, final=0.99) == pytest.approx(0.9)


def test_teacher_temperature_warm_up_by_hand():
    # linspace(0.04, 0.07, 4) = 0.04, 0.05, 0.06, 0.07, then 0.07
    assert [round(teacher_temperature(s, 0.04, 0.07, 4), 10) for s in range(6)] == [
        0.04, 0.05, 0.06, 0.07, 0.07, 0.07]
    assert teacher_temperature(0, 0.04, 0.07, 0) == 0.07


def test_teacher_is_an_ema_of_the_student_after_each_update():
    model = build(tiny_dino())
    for _, t in model.student_pairs():
        assert not t.requires_grad
    for s, t in model.student_pairs():  # starts as the student's copy
        assert torch.equal(s, t)
    with torch.no_grad():
        model.backbone.cls_token.fill_(1.0)
        model.teacher.backbone.cls_token.fill_(3.0)
    m0 = model.update_teacher()
    assert m0 == pytest.approx(0.996) and int(model.steps) == 1
    # 0.996 * 3 + 0.004 * 1
    assert model.teacher.backbone.cls_token[0, 0, 0].item() == pytest.approx(2.992, rel=1e-6)
    with torch.no_grad():
        model.backbone.cls_token.fill_(-1.0)
    m1 = model.update_teacher()  # step 1 of 10: 1 - 0.002 * (1 + cos(pi / 10))
    assert m1 == pytest.approx(1 - 0.002 * (1 + math.cos(math.pi / 10)))
    assert model.teacher.backbone.cls_token[0, 0, 0].item() == pytest.approx(
        m1 * 2.992 + (1 - m1) * -1.0, rel=1e-6)


def test_hook_updates_the_teacher_only_when_the_optimiser_stepped():
    """Gradient accumulation: no teacher update on the iterations that only accumulate."""
    from types import SimpleNamespace

    from mmengine.logging import MessageHub

    from densevit.engine.dino_teacher_hook import DINOTeacherUpdateHook
    model = build(tiny_dino())
    hub = MessageHub.get_instance('dino_hook_test')
    stepped = [False, True]
    runner = SimpleNamespace(model=model, message_hub=hub, optim_wrapper=SimpleNamespace(
        should_update=lambda: stepped[0]))
    hook = DINOTeacherUpdateHook()
    hook.after_train_iter(runner, 0)
    assert int(model.steps) == 0
    stepped[0] = True
    hook.after_train_iter(runner, 1)
    assert int(model.steps) == 1
    assert hub.get_scalar('train/teacher_momentum').current() == pytest.approx(0.996)


def test_a_missing_teacher_hook_is_an_error():
    model = build(tiny_dino(max_forwards_without_update=2))
    model.train()
    crops = [torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32)]
    model(crops, mode='loss')
    model(crops, mode='loss')
    with pytest.raises(RuntimeError, match='DINOTeacherUpdateHook'):
        model(crops, mode='loss')


# ---- the weight-normalised last layer --------------------------------------------------------

def test_last_layer_is_weight_normalised_with_g_fixed_to_1():
    torch.manual_seed(0)
    head = DINOProjectionHead(in_channels=4, out_channels=3, hidden_channels=8,
                              bottleneck_channels=2)
    head.init_weights()
    last = head.last_layer
    assert 'last_layer.weight_g' in dict(head.named_buffers())
    assert 'last_layer.weight_g' not in dict(head.named_parameters())
    assert set(head.state_dict()) >= {'last_layer.weight_g', 'last_layer.weight_v'}
    # each output is the cosine between the (normalised) bottleneck and a row of v
    z = torch.tensor([[0.6, -0.8]])  # unit norm already
    v = last.weight_v.detach().tolist()
    ref = [(0.6 * r[0] - 0.8 * r[1]) / math.sqrt(r[0] ** 2 + r[1] ** 2) for r in v]
    assert last(z)[0].tolist() == pytest.approx(ref, rel=1e-5)
    # trained a step: v moves, g stays 1, the effective rows keep unit norm
    opt = torch.optim.SGD(head.parameters(), lr=1.0)
    head(torch.randn(5, 4)).pow(2).sum().backward()
    opt.step()
    assert not torch.equal(last.weight_v.detach(), torch.tensor(v))
    assert torch.equal(last.weight_g, torch.ones(3, 1))
    assert torch.allclose(last.weight.norm(dim=1), torch.ones(3), atol=1e-6)
    trained = DINOProjectionHead(4, 3, 8, 2, norm_last_layer=False).last_layer
    assert isinstance(trained.weight_g, torch.nn.Parameter)


def test_head_mlp_is_three_layers_with_gelu_and_a_normalised_bottleneck():
    head = DINOProjectionHead(in_channels=4, out_channels=3, hidden_channels=8,
                              bottleneck_channels=2)
    kinds = [type(m).__name__ for m in head.mlp]
    assert kinds == ['Linear', 'GELU', 'Linear', 'GELU', 'Linear']
    assert [m.out_features for m in head.mlp if hasattr(m, 'out_features')] == [8, 8, 2]


# ---- multi-crop -------------------------------------------------------------------------------

def multi_crop(**kwargs):
    with DefaultScope.overwrite_default_scope('densevit'):
        return TRANSFORMS.build(dict(dict(type='DINOMultiCrop', global_size=32, local_size=16,
                                          num_local=3), **kwargs))


def test_multi_crop_sizes_and_count():
    img = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    out = multi_crop()(dict(img=img, img_path='a.png'))
    assert [c.shape for c in out['crops']] == [(32, 32, 3)] * 2 + [(16, 16, 3)] * 3
    assert all(c.dtype == np.uint8 for c in out['crops']) and out['img_shape'] == (32, 32)
    # a validation seed: the same crops for the same image, other ones for another
    fixed = multi_crop(seed=0)
    a = fixed(dict(img=img, img_path='a.png'))['crops']
    b = fixed(dict(img=img, img_path='a.png'))['crops']
    c = fixed(dict(img=img, img_path='b.png'))['crops']
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    packed = TRANSFORMS.build(dict(type='PackMultiCropInputs'))(dict(out, img_path='a.png'))
    assert [tuple(t.shape) for t in packed['inputs']] == [(3, 32, 32)] * 2 + [(3, 16, 16)] * 3


@pytest.mark.parametrize('kwargs, message', [
    (dict(num_global=1), 'num_global must be an integer >= 2 (the teacher compares each global '
                         'crop with the others), got 1'),
    (dict(local_size=48), 'local crops (48x48, local_size=48) larger than the global ones '
                          '(32x32, global_size=32)'),
    (dict(local_scale=(0.05, 0.6), global_scale=(0.4, 0.5)),
     'local_scale=(0.05, 0.6) above global_scale=(0.4, 0.5)'),
])
def test_multi_crop_refuses_bad_crops_at_build_time(kwargs, message):
    with pytest.raises(ValueError, match=None) as e:
        multi_crop(**kwargs)
    assert message in str(e.value)


def test_model_refuses_fewer_than_two_global_crops_or_no_class_token():
    with pytest.raises(ValueError, match=r'num_global_crops must be an integer >= 2 .* got 1'):
        build(tiny_dino(num_global_crops=1))
    cfg = tiny_dino()
    cfg['backbone'] = dict(cfg['backbone'], with_cls_token=False)
    with pytest.raises(ValueError, match='needs a class token'):
        build(cfg)
    model = build(tiny_dino())
    with pytest.raises(ValueError, match=r'local crop 2 is 40x40, larger than the global'):
        model([torch.randn(1, 3, 32, 32)] * 2 + [torch.randn(1, 3, 40, 40)])


# ---- the config, training, resume and the figure ---------------------------------------------

def test_quickstart_backbone_is_the_detection_vit_with_a_class_token():
    cfg = Config.fromfile(str(QUICKSTART))
    det = Config.fromfile(str(REPO / 'configs' / 'quickstart' / 'deformable_detr_vit_shapes.py'))
    assert dict(cfg.model.backbone, with_cls_token=False) == det.model.backbone
    crop = cfg.train_pipeline[1]
    assert (crop.global_size, crop.local_size, crop.num_global, crop.num_local) == (128, 56, 2, 6)
    assert (crop.global_scale, crop.local_scale) == ((0.4, 1.0), (0.05, 0.4))
    m = cfg.model
    assert (m.teacher_temp.start, m.teacher_temp.end, m.student_temp) == (0.04, 0.07, 0.1)
    assert (m.momentum.base, m.momentum.final, m.momentum.total_steps) == (
        0.996, 1.0, cfg.train_cfg.max_iters)
    for split in ('train', 'val'):  # the same images under data/shapes/
        assert cfg[f'{split}_dataloader'].dataset.generate == \
            det[f'{split}_dataloader'].dataset.generate
    with DefaultScope.overwrite_default_scope('densevit'):
        model = MODELS.build(cfg.model)
        detector_vit = MODELS.build(det.model.backbone)
    # the student's (and the teacher's) backbone.* load into the detector's ViT: the class
    # token and its position row are dropped, every other tensor fits
    for prefix in ('backbone.', 'teacher.backbone.'):
        state = {k[len(prefix):]: v for k, v in model.state_dict().items() if k.startswith(prefix)}
        assert str(detector_vit.load_state_dict(state)) == '<All keys matched successfully>'
        assert torch.equal(detector_vit.pos_embed.weight, state['pos_embed.weight'][:, 1:])


@pytest.mark.parametrize('prefix, which', [(None, 'backbone'), ('backbone.', 'backbone'),
                                           ('teacher.backbone.', 'teacher')])
def test_a_detectors_vit_without_class_token_starts_from_the_checkpoint(tmp_path, prefix, which):
    """init_cfg Pretrained, as the fine-tuning configs: no prefix or 'backbone.' take the student,
    'teacher.backbone.' the teacher; the class token and its position row are dropped."""
    model = build(tiny_dino())
    with torch.no_grad():
        model.teacher.backbone.blocks[0].attn.qkv.weight.add_(1.0)  # tell them apart
    ckpt = tmp_path / 'dino.pth'
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    init = dict(type='Pretrained', checkpoint=str(ckpt), **({'prefix': prefix} if prefix else {}))
    vit = build(dict(tiny_dino()['backbone'], with_cls_token=False, init_cfg=init))
    source = model.teacher.backbone if which == 'teacher' else model.backbone
    for key, value in vit.state_dict().items():
        expected = source.state_dict()[key]
        if key == 'pos_embed.weight':
            expected = expected[:, 1:]
        assert torch.equal(value, expected), key


def tiny_config(tmp_path, extra=''):
    """The quickstart shrunk: a 1-layer ViT of width 32 at 32 pixels (2 x 32 + 2 x 16 crops) on
    folders of random images (train: 6, val: 4)."""
    write_images(tmp_path / 'imgs' / 'train', 6, (40, 48))
    write_images(tmp_path / 'imgs' / 'val', 4, (32, 32))
    root = (tmp_path / 'imgs').as_posix() + '/'
    text = f"""
_base_ = [{str(QUICKSTART)!r}]
model = dict(backbone=dict(img_size=32, arch=dict(embed_dims=32, num_layers=1, num_heads=2,
                                                  feedforward_channels=64)),
             head=dict(out_channels=64, hidden_channels=32, bottleneck_channels=16),
             teacher_temp=dict(warmup_steps=2), momentum=dict(total_steps=4))
crop = dict(type='DINOMultiCrop', global_size=32, local_size=16, num_local=2)
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    _delete_=True, type='UnlabelledImageDataset', data_root={root!r},
    data_prefix=dict(img_path='train/'),
    pipeline=[dict(type='LoadImage'), crop, dict(type='PackMultiCropInputs')]))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    _delete_=True, type='UnlabelledImageDataset', data_root={root!r},
    data_prefix=dict(img_path='val/'), test_mode=True,
    pipeline=[dict(type='LoadImage'), dict(crop, seed=0), dict(type='PackMultiCropInputs')]))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=2, val_interval=2)
param_scheduler = [dict(type='LinearLR', start_factor=0.5, by_epoch=False, begin=0, end=2)]
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=1, max_keep_ckpts=5))
""" + extra
    path = tmp_path / 'tiny_dino.py'
    path.write_text(text)
    return str(path)


def state(path):
    return torch.load(path, map_location='cpu', weights_only=False)['state_dict']


def test_config_trains_through_train_py_and_resumes_with_the_teacher(tmp_path):
    config = tiny_config(tmp_path)
    work = tmp_path / 'work'
    train = load_tool('tools/train.py')
    with isolated():
        assert train.main([config, '--work-dir', str(work),
                           '--cfg-options', *unique_names()]) == 0
    records = scalar_records(work)
    assert [r['step'] for r in records if 'loss_dino' in r] == [1, 2]
    assert [r['teacher_momentum'] for r in records if 'teacher_momentum' in r] == pytest.approx(
        [0.996, 1 - 0.002 * (1 + math.cos(math.pi / 4))])  # steps 0 and 1 of 4
    val = [r for r in records if 'pretrain/objective' in r]
    assert [r['step'] for r in val] == [2] and val[0]['pretrain/objective'] > 0
    one, two = state(work / 'iter_1.pth'), state(work / 'iter_2.pth')
    assert int(one['steps']) == 1 and int(two['steps']) == 2
    assert one['center'].abs().sum() > 0  # the center is in the checkpoint
    # resume from iteration 1 in another work dir: the teacher continues from the checkpoint's
    # (not a fresh copy of the student): teacher_2 = m1 * teacher_1 + (1 - m1) * student_2
    again = tmp_path / 'again'
    with isolated():
        assert train.main([config, '--work-dir', str(again), '--resume', str(work / 'iter_1.pth'),
                           '--cfg-options', *unique_names()]) == 0
    resumed = state(again / 'iter_2.pth')
    assert int(resumed['steps']) == 2
    m1 = 1 - 0.002 * (1 + math.cos(math.pi / 4))
    for key in ('backbone.cls_token', 'backbone.blocks.0.attn.qkv.weight',
                'head.last_layer.weight_v'):
        expected = m1 * one['teacher.' + key] + (1 - m1) * resumed[key]
        assert torch.allclose(resumed['teacher.' + key], expected, atol=1e-6), key
        assert not torch.allclose(resumed['teacher.' + key], resumed[key])
    # the center went on from the checkpoint's: 0.9 of it is still there
    assert not torch.allclose(resumed['center'], torch.zeros_like(resumed['center']))


@pytest.mark.parametrize('options', [[], ['--student', '--threshold', '0.6']])
def test_attention_figure_is_a_png_of_the_expected_size(tmp_path, capsys, options):
    config = tiny_config(tmp_path)
    ckpt = tmp_path / 'dino.pth'
    torch.save(dict(state_dict=build(Config.fromfile(config).model).state_dict()), ckpt)
    out = tmp_path / 'attn.png'
    with isolated():
        rc = load_tool('tools/analysis/dino_attention.py').main(
            [config, str(ckpt), '--num', '3', '--out', str(out), '--gap', '2', *options])
    assert rc == 0, capsys.readouterr().err
    img = cv2.imread(str(out))
    heads = 2
    assert img.shape == (3 * 32 + 2 * 2, (1 + heads) * 32 + heads * 2, 3)
    # the first panel of each row is the validation image itself (sorted: 0.png first)
    assert np.array_equal(img[:32, :32], cv2.imread(str(tmp_path / 'imgs' / 'val' / '0.png')))
    which = 'the backbone' if options else 'the teacher'
    assert f"3 images x 2 heads, the class token's last-layer attention in {which}" in \
        capsys.readouterr().out


def test_attention_figure_for_another_vit_and_refusal_without_class_token(tmp_path, capsys):
    """Any ViT checkpoint with a class token (here an MAE's), and a clear refusal without."""
    tiny = tiny_config(tmp_path)
    mae = tmp_path / 'mae.py'
    mae.write_text(f"""_base_ = [{tiny!r}]
model = dict(_delete_=True, type='MAE', mask_ratio=0.75,
             data_preprocessor=dict(type='ImgDataPreprocessor', mean=[123.675, 116.28, 103.53],
                                    std=[58.395, 57.12, 57.375], bgr_to_rgb=True),
             backbone={{{{_base_.model.backbone}}}},
             neck=dict(type='MAEPretrainDecoder', embed_dims=16, num_layers=1, num_heads=2),
             head=dict(type='MAEPretrainHead'))
""")
    tool = load_tool('tools/analysis/dino_attention.py')
    out = tmp_path / 'mae.png'
    with isolated():
        assert tool.main([str(mae), 'none', '--num', '2', '--out', str(out)]) == 0
        assert cv2.imread(str(out)).shape == (2 * 32 + 2, 3 * 32 + 2 * 2, 3)
        assert tool.main([str(mae), 'none', '--out', str(out), '--cfg-options',
                          'model.backbone.with_cls_token=False']) == 1
    err = capsys.readouterr().err
    assert 'has no class token (with_cls_token=False)' in err
