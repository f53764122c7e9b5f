"""tools/analysis/study_pos_embed.py: the mosaic layout by hand, and a figure of a study whose
runs are faked (a checkpoint of the built model and a metrics file for two rows; a third row
has a checkpoint but no metrics file: not finished), drawn again from the panel files kept beside
the metrics files once the checkpoints are gone."""
import json
import subprocess
import sys

import numpy as np
import torch

from tiny_run import REPO, load_tool

study_pos_embed = load_tool('tools/analysis/study_pos_embed.py')


def test_mosaic_places_tile_i_j_with_nan_gaps():
    grid = np.arange(2 * 3 * 2 * 3, dtype=float).reshape(2, 3, 2, 3)
    out = study_pos_embed.mosaic(grid)
    assert out.shape == (2 * 3 - 1, 3 * 4 - 1)
    np.testing.assert_array_equal(out[3:5, 4:7], grid[1, 1])
    np.testing.assert_array_equal(out[0:2, 8:11], grid[0, 2])
    assert np.isnan(out[2]).all() and np.isnan(out[:, 3]).all() and np.isnan(out[:, 7]).all()


def test_last_checkpoint_is_the_highest_iteration(tmp_path):
    for i in (500, 3000, 1000):
        (tmp_path / f'iter_{i}.pth').touch()
    assert study_pos_embed.last_checkpoint(str(tmp_path)).endswith('iter_3000.pth')
    assert study_pos_embed.last_checkpoint(str(tmp_path / 'none')) is None


def test_figure_of_finished_rows(tmp_path):
    from densevit.apis import init_model
    study = REPO / 'configs' / 'studies' / 'vit_pe_seg'
    for row, finished in (('learned_2d-stem', True), ('rope-every_layer', True),
                          ('relative-every_layer', False), ('none', True)):
        name = f'vit_seg_shapes_pe-{row}'
        run = tmp_path / 'work' / 'vit_pe_seg' / name / 'seed0'
        run.mkdir(parents=True)
        model = init_model(str(study / f'{name}.py'), None)
        with torch.no_grad():  # tables that start at zero: as if learned
            for key, param in model.named_parameters():
                if 'pos' in key:
                    param.normal_(generator=torch.Generator().manual_seed(0))
        torch.save({'state_dict': model.state_dict()}, run / 'iter_7.pth')
        if finished:
            metrics = tmp_path / 'results' / 'vit_pe_seg' / name / 'seed0.json'
            metrics.parent.mkdir(parents=True)
            metrics.write_text('{}')
    out, data = tmp_path / 'fig.png', tmp_path / 'fig.json'
    run = subprocess.run([sys.executable, 'tools/analysis/study_pos_embed.py', str(study),
                          '--work-root', str(tmp_path / 'work'), '--results',
                          str(tmp_path / 'results'), '--out', str(out), '--json', str(data), '--with-grids'],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert out.stat().st_size > 10_000
    panels = json.loads(data.read_text())
    assert [p['row'] for p in panels['results']] == ['learned_2d-stem', 'rope-every_layer']
    assert [p['kind'] for p in panels['results']] == ['cosine', 'rope_similarity']
    assert 'relative-every_layer (not finished)' in panels['skipped']
    assert 'none (no position embedding)' in panels['skipped']
    assert 'learned_1d-stem (not finished)' in panels['skipped']
    # the checkpoints gone (a later session): the kept panel files draw the same panels
    kept = tmp_path / 'results' / 'vit_pe_seg' / 'vit_seg_shapes_pe-learned_2d-stem' / 'seed0_pos_embed.npz'
    assert kept.is_file()
    for ckpt in (tmp_path / 'work').rglob('iter_7.pth'):
        ckpt.unlink()
    again = tmp_path / 'again.json'
    run = subprocess.run([sys.executable, 'tools/analysis/study_pos_embed.py', str(study),
                          '--work-root', str(tmp_path / 'work'), '--results',
                          str(tmp_path / 'results'), '--out', str(tmp_path / 'again.png'),
                          '--json', str(again), '--with-grids'],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    redrawn = json.loads(again.read_text())
    assert [p['row'] for p in redrawn['results']] == ['learned_2d-stem', 'rope-every_layer']
    assert redrawn['skipped'] == panels['skipped']
    for new, old in zip(redrawn['results'], panels['results'], strict=True):
        assert new['kind'] == old['kind'] and new['checkpoint'] == old['checkpoint']
        np.testing.assert_allclose(new['grid'], old['grid'], atol=2e-3)  # float16, 4 decimals
    grid = np.array(panels['results'][0]['grid'])
    assert grid.shape == (12, 12, 12, 12)
    # cosine similarity: 1 of a patch with itself, symmetric
    flat = grid.reshape(144, 144)
    np.testing.assert_allclose(flat.diagonal(), 1.0, atol=1e-5)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
