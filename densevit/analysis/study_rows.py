"""Where a study config sits in its table: its row name (from the file name) and its
(position-embedding type, placement) cell; shared by ``tools/run_study.py`` and
``tools/analysis/study_pos_embed.py``."""
import os.path as osp

from mmengine.config import Config

from densevit.models.layers.pos_embed_builder import parse_position_embedding_cfg


def row_name(config):
    """``detr_vit_shapes_pe-learned_1d-stem.py`` -> ``learned_1d-stem``; else the stem."""
    return osp.splitext(osp.basename(config))[0].split('_pe-', 1)[-1]


def position(config):
    """(row, column) of ``config`` in the table: its ViT's position-embedding type and
    placement ('none' in the stem column), or (row name, '') without a ``pos_embed``. RoPE's
    other convention and RoPE-Mixed are rows of their own ('rope dinov3', 'rope mixed')."""
    backbone = Config.fromfile(config).model.get('backbone') or {}
    if 'pos_embed' not in backbone:
        return row_name(config), ''
    pe_type, placement, options = parse_position_embedding_cfg(backbone['pos_embed'])
    if pe_type == 'rope':  # its variants are rows of their own: 'rope dinov3', 'rope mixed'
        variant = [options['convention']] if options.get('convention', 'eva02') != 'eva02' else []
        pe_type = ' '.join([pe_type, *variant, *(['mixed'] if options.get('mixed') else [])])
    return pe_type, placement or 'stem'
