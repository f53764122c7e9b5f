"""The ViT analysis tools run end to end on a tiny ViT and write PNG + numbers (with the
config, checkpoint and provenance: densevit/analysis/cli.py)."""
import importlib.util
import json
import os.path as osp
import sys

import pytest

TOOLS = osp.join(osp.dirname(__file__), '..', '..', 'tools', 'analysis')
CONFIG = """default_scope = 'densevit'
model = dict(type='VisionTransformer', img_size=32, patch_size=8,
             arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
             pos_embed=dict(type='sincos_2d', placement='stem'))
"""


def run_tool(name, argv, monkeypatch):
    spec = importlib.util.spec_from_file_location(name, osp.join(TOOLS, name + '.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(sys, 'argv', [name] + argv)
    mod.main()


@pytest.mark.parametrize('tool, extra, outputs', [
    ('pos_embed_similarity', [], ['pos_embed_similarity_stem.png', 'pos_embed_similarity.json']),
    ('patch_filters', ['--num-components', '4'], ['patch_filters.png', 'patch_filters.json']),
    ('attention_distance', ['--num-images', '3', '--batch-size', '2'],
     ['attention_distance.png', 'attention_distance.json']),
    ('attention_rollout', ['--num-images', '3', '--show', '1'],
     ['attention_rollout_0.png', 'attention_rollout.json']),
])
def test_tool_writes_png_and_numbers(tool, extra, outputs, tmp_path, monkeypatch):
    cfg = tmp_path / 'tiny_vit.py'
    cfg.write_text(CONFIG)
    out = tmp_path / 'out'
    run_tool(tool, [str(cfg), 'none', '--out-dir', str(out)] + extra, monkeypatch)
    for f in outputs:
        assert (out / f).stat().st_size > 0
    written = json.loads((out / outputs[-1]).read_text())
    assert written['config'] == str(cfg) and written['checkpoint'] is None
    assert {'command', 'commit', 'cpu_model', 'torch_threads'} <= set(written['provenance'])
    numbers = written['results']
    if tool == 'attention_distance':
        assert len(numbers['distance']) == 2 and len(numbers['distance'][0]) == 2
        assert numbers['num_images'] == 3
    if tool == 'attention_rollout':
        assert len(numbers['maps']) == 3 and numbers['grid'] == [4, 4]


def test_json_option_moves_the_numbers(tmp_path, monkeypatch):
    cfg = tmp_path / 'tiny_vit.py'
    cfg.write_text(CONFIG)
    out = tmp_path / 'kept' / 'filters.json'
    run_tool('patch_filters', [str(cfg), 'none', '--out-dir', str(tmp_path / 'out'),
                               '--num-components', '2', '--json', str(out)], monkeypatch)
    assert not (tmp_path / 'out' / 'patch_filters.json').exists()
    written = json.loads(out.read_text())
    assert len(written['results']['explained_variance_ratio']) == 2
    assert written['provenance']['command'].split()[-1] == str(out)
