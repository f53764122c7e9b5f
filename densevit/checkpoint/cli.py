"""The command line of the converters in ``tools/convert/``.

``tools/convert/checkpoint.py`` (any layout densevit knows, :func:`.convert.convert_any`)
and ``tools/convert/mae.py`` pass their converter (``state_dict, strict -> state_dict``)
to :func:`run`::

    python tools/convert/checkpoint.py IN OUT [--prefix P] [--keep-unmatched]

The input is read with :func:`densevit.checkpoint.read.read_checkpoint`
(``torch.load(weights_only=True)`` or safetensors). The output, ``.pth`` or
``.safetensors`` by its extension, holds the tensors and a ``meta`` recording the
origin's layout name and backbone options (:func:`.convert.converted_meta`), so that the
converted file loads into the same model as the file it came from.
"""
import argparse
import json
import pickle
import sys

import torch

from .convert import converted_meta
from .read import read_checkpoint, select_prefix

META_KEY = 'densevit_meta'  # a .safetensors file's metadata entry holding the meta as JSON


def run(convert, what, argv=None):
    """``IN OUT [--prefix P] [--keep-unmatched]``: read safely, convert, save a plain state dict.

    Returns 0 on success (the process exit status).
    """
    p = argparse.ArgumentParser(
        description=f'Convert a {what} checkpoint to densevit\'s key layout. The input is read '
                    f'with torch.load(weights_only=True) (or safetensors); the output is a plain '
                    f'state dict (with the origin\'s options in its meta) for '
                    f'init_cfg=dict(type="Pretrained", checkpoint=OUT), load_from or init_model.')
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
    meta = converted_meta(out)
    out = {k: v.contiguous() for k, v in out.items()}
    if args.dst.endswith('.safetensors'):
        from safetensors.torch import save_file
        save_file(out, args.dst, metadata={META_KEY: json.dumps(meta)})
    else:
        torch.save({'state_dict': out, 'meta': meta}, args.dst)
    print(f'{args.src}: {len(state_dict)} tensors'
          + (f' in the {layout} layout' if layout else '')
          + f' -> {args.dst}: {len(out)} tensors ({sum(v.numel() for v in out.values()):,} values)')
    if partial:
        print(f'WARNING: {args.dst} IS PARTIAL: {partial} key(s) of the input had no '
              f'conversion rule and were written unchanged; a densevit model will not load '
              f'them', file=sys.stderr)
    return 0
