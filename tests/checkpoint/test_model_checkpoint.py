"""Whole-model checkpoints through the public paths (``init_model``, ``tools/test.py``,
``tools/convert/checkpoint.py``): converted on load, strict, and refused clearly when they
do not fit.

The foreign file is a tiny Hugging Face DETR (transformers is the reference), saved as
``model.safetensors`` and as an mmengine-style ``{'state_dict', 'meta'}`` file.
"""
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from densevit.apis import init_model
from densevit.checkpoint.match import CheckpointMismatchError
from densevit.checkpoint.model import describe_meta
from densevit.checkpoint.read import CorruptCheckpointError, read_checkpoint
from densevit.structures import DataSample

from hf_references import DETR_SIZES, tiny_hf_detr
from tiny_checkpoints import trained_checkpoint

REPO = Path(__file__).resolve().parents[2]
D, HEADS, FFN, QUERIES, CLASSES, LAYERS = (DETR_SIZES[k] for k in (
    'd_model', 'heads', 'ffn', 'queries', 'classes', 'layers'))

CONFIG = f"""
default_scope = 'densevit'
model = dict(
    type='DETR',
    backbone=dict(type='ResNet', depth=50, base_channels=8, stage_blocks=(1, 1, 1, 1),
                  out_indices=(3,), norm_cfg=dict(type='FrozenBN')),
    bbox_head=dict(type='DETRHead', num_classes={CLASSES}, embed_dims={D},
                   num_queries={QUERIES},
                   transformer=dict(num_heads={HEADS}, num_encoder_layers={LAYERS},
                                    num_decoder_layers={LAYERS}, feedforward_channels={FFN},
                                    dropout=0.)))
"""


@pytest.fixture(scope='module')
def hf_detr(tmp_path_factory):
    model = tiny_hf_detr(seed=3)
    root = tmp_path_factory.mktemp('hf_detr_model')
    model.save_pretrained(root)
    (root / 'detr.py').write_text(CONFIG)
    return model, root


def _logits(model, hf):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        ours = model(x, [DataSample(metainfo=dict(img_shape=(64, 96)))], mode='tensor')
        ref = hf(pixel_values=x)
    return ours['pred_logits'][-1], ref.logits


def test_init_model_converts_a_foreign_file_on_load(hf_detr, log_lines):
    hf, root = hf_detr
    model = init_model(root / 'detr.py', root / 'model.safetensors')
    ours, ref = _logits(model, hf)
    assert (ours - ref).abs().max() <= 1e-4
    assert any('Hugging Face DETR layout, converted' in m for _, m in log_lines)


def _mmengine_file(hf, path, extra=None):
    state = dict(hf.state_dict(), **(extra or {}))
    meta = dict(cfg="model = dict(type='DetrForObjectDetection')", mmengine_version='0.10.7')
    torch.save(dict(state_dict=state, meta=meta), path)
    return path


def test_non_weight_keys_are_skipped_with_a_count(hf_detr, tmp_path, log_lines):
    hf, root = hf_detr
    path = _mmengine_file(hf, tmp_path / 'with_ema.pth', {
        'ema_model.x': torch.ones(2), 'data_preprocessor.mean': torch.ones(3)})
    model = init_model(root / 'detr.py', path)
    ours, ref = _logits(model, hf)
    assert (ours - ref).abs().max() <= 1e-4
    assert any('skipped 2 key(s) that are not model weights' in m for _, m in log_lines)


def test_a_partly_understood_layout_is_refused(hf_detr, tmp_path):
    hf, root = hf_detr
    path = _mmengine_file(hf, tmp_path / 'partial.pth', {'model.extra_proj.weight': torch.ones(2)})
    n = len(hf.state_dict()) + 1
    with pytest.raises(CheckpointMismatchError,
                       match=rf'partial\.pth.*Hugging Face DETR layout.*only {n - 1} of {n} '
                             r'are understood.*model\.extra_proj\.weight'):
        init_model(root / 'detr.py', path)


def test_another_architecture_names_both(hf_detr, tmp_path_factory):
    """A (densevit) segmentor checkpoint given to a DETR config."""
    _, root = hf_detr
    seg = trained_checkpoint(tmp_path_factory, 'seg')
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(root / 'detr.py', seg['ckpt'])
    message = str(e.value)
    assert 'iter_4.pth does not fit this model' in message
    assert 'EncoderDecoder(' in message  # the checkpoint's model, from its meta
    assert 'the config builds DETR(ResNet, DETRHead)' in message


def test_truncated_file_names_the_file(hf_detr, tmp_path):
    hf, root = hf_detr
    whole = _mmengine_file(hf, tmp_path / 'whole.pth').read_bytes()
    (tmp_path / 'cut.pth').write_bytes(whole[:len(whole) // 2])
    with pytest.raises(CorruptCheckpointError, match=r'cut\.pth is truncated or corrupt'):
        init_model(root / 'detr.py', tmp_path / 'cut.pth')
    (tmp_path / 'cut.safetensors').write_bytes((root / 'model.safetensors').read_bytes()[:1000])
    with pytest.raises(CorruptCheckpointError, match=r'cut\.safetensors is truncated'):
        read_checkpoint(tmp_path / 'cut.safetensors')


def test_describe_meta():
    meta = {'cfg': "default_scope = 'mmseg'\nmodel = dict(\n    type='EncoderDecoder',\n"
                   "    backbone=dict(type='MixVisionTransformer', norm_cfg=dict(type='LN')),\n"
                   "    decode_head=dict(type='SegformerHead'))", 'mmseg_version': '1.2.2',
            'mmengine_version': '0.10.7'}
    assert describe_meta(meta) == 'mmseg 1.2.2 EncoderDecoder(MixVisionTransformer, SegformerHead)'
    assert describe_meta({'epoch': 3}) is None
    assert describe_meta(None) is None


def test_convert_tool(hf_detr, tmp_path):
    hf, root = hf_detr
    path = _mmengine_file(hf, tmp_path / 'in.pth')
    tool = REPO / 'tools' / 'convert' / 'checkpoint.py'
    run = subprocess.run([sys.executable, str(tool), str(path), str(tmp_path / 'out.pth')],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    n = len(hf.state_dict())
    assert f'in.pth: {n} tensors in the Hugging Face DETR layout -> ' in run.stdout
    out = torch.load(tmp_path / 'out.pth', weights_only=True)
    assert out['meta'] == {'densevit_origin': 'Hugging Face DETR', 'densevit_options': {}}
    model = init_model(root / 'detr.py')
    model.load_state_dict(out['state_dict'], strict=True)  # nothing left to convert

    partial = _mmengine_file(hf, tmp_path / 'partial.pth', {'model.extra.weight': torch.ones(1)})
    refused = subprocess.run([sys.executable, str(tool), str(partial), str(tmp_path / 'p.pth')],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and not (tmp_path / 'p.pth').exists()
    assert f'only {n} of {n + 1} are understood' in refused.stderr
    kept = subprocess.run([sys.executable, str(tool), str(partial), str(tmp_path / 'p.pth'),
                           '--keep-unmatched'], capture_output=True, text=True)
    assert kept.returncode == 0 and 'IS PARTIAL: 1 key(s)' in kept.stderr


def test_strict_is_not_used_for_fine_tuning(hf_detr, tmp_path, log_lines):
    """load_from in training reports mismatches (e.g. another class count) and goes on."""
    from densevit.checkpoint.model import load_model_weights
    hf, root = hf_detr
    model = init_model(root / 'detr.py', cfg_options={'model.bbox_head.num_classes': 7})
    report = load_model_weights(model, read_checkpoint(root / 'model.safetensors'),
                                'model.safetensors', strict=False)
    # [K + 1, D] and [K + 1] in the file (K = 91 here), [8, D] and [8] in the model
    assert [(k, tuple(want)) for k, _, want in report.mismatched] == [
        ('bbox_head.class_embed.weight', (8, model.bbox_head.class_embed.in_features)),
        ('bbox_head.class_embed.bias', (8,))]
    assert any(level == logging.WARNING and 'WRONG SHAPE' in m for level, m in log_lines)


def test_an_openmmlab_file_of_another_family_names_both(hf_detr):
    """The mmseg SegFormer fixture given to a DETR config: the error names the layout
    the file was recognised as, what its meta says, and what the config builds."""
    _, root = hf_detr
    fixture = REPO / 'tests' / 'checkpoint' / 'fixtures' / 'mmseg_segformer.pth'
    with pytest.raises(CheckpointMismatchError) as e:
        init_model(root / 'detr.py', fixture)
    message = str(e.value)
    assert 'mmseg_segformer.pth does not fit this model' in message
    assert 'a MMSegmentation SegFormer checkpoint' in message
    assert 'mmseg 1.2.2 EncoderDecoder(MixVisionTransformer, SegformerHead)' in message
    assert 'the config builds DETR(ResNet, DETRHead)' in message
