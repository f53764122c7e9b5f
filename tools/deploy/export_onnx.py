"""Export a checkpoint to ONNX: ``python tools/deploy/export_onnx.py CONFIG CKPT --out F.onnx
[--dynamic] [--opset 18] [--shape H W] [--batch 2] [--verify]``.

The graph reads the data preprocessor's output (normalised, padded float32 [B, 3, H, W];
detectors also the padding mask [B, H, W], True on padding) and returns the raw
outputs (segmentors: logits at the input size; detectors: the last decoder layer's
logits and normalised boxes; mask classifiers, EoMT and Mask2Former: the final class and
mask logits); post-processing stays in the model's ``postprocess``, shared
by both backends (densevit/deploy/). Needs ``pip install -e .[deploy]``.
"""
import argparse
import sys

import torch

from densevit.apis import init_model
from densevit.checkpoint.model import CHECKPOINT_ERRORS


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Export a densevit model to ONNX')
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--out', required=True, help='the .onnx file to write')
    p.add_argument('--dynamic', action='store_true',
                   help='dynamic batch, height and width (else fixed to --batch / --shape)')
    p.add_argument('--opset', type=int, default=18, help='ONNX opset (>= 16)')
    p.add_argument('--shape', type=int, nargs=2, default=(96, 128), metavar=('H', 'W'),
                   help='example input size (avoid 1s and H == W with --dynamic)')
    p.add_argument('--batch', type=int, default=2, help='example batch size')
    p.add_argument('--verify', action='store_true',
                   help='run the file in ONNX Runtime on a fresh input and print the '
                        'largest difference from PyTorch')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        from densevit.deploy.export import ExportError, export_onnx
    except ImportError as e:
        print(f'densevit: ONNX export needs the deploy extra (pip install -e .[deploy]): {e}',
              file=sys.stderr)
        return 1
    try:
        # a missing config or checkpoint (FileNotFoundError), an unknown type (KeyError),
        # a checkpoint that is corrupt, unsafe or of another model
        model = init_model(args.config, args.checkpoint)
        with torch.no_grad():
            graph = export_onnx(model, args.out, dynamic=args.dynamic, opset=args.opset,
                                example_size=tuple(args.shape), batch=args.batch)
    except (*CHECKPOINT_ERRORS, ExportError, FileNotFoundError, KeyError, ValueError,
            TypeError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # no quotes
        print(f'densevit: {message}', file=sys.stderr)
        return 1
    print(f'densevit: wrote {args.out} (inputs {list(graph.input_names)}, outputs '
          f'{list(graph.output_names)}, opset {args.opset}, '
          f"{'dynamic' if args.dynamic else 'fixed'} shapes)")
    if args.verify:
        from densevit.deploy.graphs import task_of
        from densevit.deploy.runtime import OnnxGraph

        h, w = args.shape
        inputs = graph.example_inputs(args.batch, (h, w) if not args.dynamic else (h + 8, w - 8))
        with torch.no_grad():
            ref = graph(*inputs)
        got = OnnxGraph(args.out, task_of(model))(*inputs)
        ref, got = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
        diff = max((g - r).abs().max().item() for g, r in zip(got, ref, strict=True))
        print(f'densevit: max |ONNX Runtime - PyTorch| = {diff:.2e} on '
              f'{list(inputs[0].shape)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
