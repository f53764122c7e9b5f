"""The command line shared by the converters in ``tools/convert/``.

Each tool passes its converter (``state_dict, strict -> state_dict``, e.g.
:func:`densevit.checkpoint.swin.convert_swin`) to :func:`run`::

    python tools/convert/swin.py IN OUT [--prefix P] [--keep-unmatched]

The input is read with :func:`densevit.checkpoint.load.read_checkpoint`
(``torch.load(weights_only=True)`` or safetensors); the output is a plain
state dict, ``.pth`` or ``.safetensors`` by its extension.
"""
import argparse
import pickle
import sys

import torch

from .load import read_checkpoint, select_prefix


def run(convert, what, argv=None):
    """``IN OUT [--prefix P] [--keep-unmatched]``: read safely, convert, save a plain state dict.

    Returns 0 on success (the process exit status).
    """
    p = argparse.ArgumentParser(
        description=f'Convert a {what} checkpoint to densevit\'s key layout. The input is read '
                    f'with torch.load(weights_only=True) (or safetensors); the output is a plain '
                    f'state dict for init_cfg=dict(type="Pretrained", checkpoint=OUT).')
    p.add_argument('src', help='input checkpoint (.pth / .bin / .safetensors)')
    p.add_argument('dst', help='output file (.pth, or .safetensors)')
    p.add_argument('--prefix', help="convert only keys under this prefix (e.g. 'backbone.')")
    p.add_argument('--keep-unmatched', action='store_true',
                   help='write keys no conversion rule explains as they are, instead of failing')
    args = p.parse_args(argv)

    try:
        state_dict = select_prefix(read_checkpoint(args.src), args.prefix)
        out = convert(state_dict, strict=not args.keep_unmatched)
    except (OSError, ValueError, RuntimeError, ImportError, pickle.UnpicklingError) as e:
        # a missing or unreadable file, pickled objects, no key under --prefix, unmatched keys
        print(f'error: {e}', file=sys.stderr)
        return 1
    layout, partial = getattr(out, 'layout', None), getattr(out, 'partial', 0)
    out = {k: v.contiguous() for k, v in out.items()}
    if args.dst.endswith('.safetensors'):
        from safetensors.torch import save_file
        save_file(out, args.dst)
    else:
        torch.save(out, args.dst)
    print(f'{args.src}: {len(state_dict)} tensors'
          + (f' in the {layout} layout' if layout else '')
          + f' -> {args.dst}: {len(out)} tensors ({sum(v.numel() for v in out.values()):,} values)')
    if partial:
        print(f'WARNING: {args.dst} IS PARTIAL: {partial} key(s) of the input had no '
              f'conversion rule and were written unchanged; a densevit model will not load '
              f'them', file=sys.stderr)
    return 0
