"""MAE reconstructions as in the MAE paper's Figure 2: masked input | reconstruction | original.

    python tools/analysis/mae_reconstruction.py configs/mae/mae_vit_shapes_quickstart.py \\
        work_dirs/mae_vit_shapes_quickstart/iter_4000.pth --num 8 --out mae_shapes.png

One row per image, the first N of the config's validation (else test) dataset, or of
``--folder DIR`` (any images: the largest centred square, resized to the backbone's
``img_size``). Each image is masked as validation masks it (its own seed, the same
every time; ``--seed`` draws other masks). The reconstruction shows the visible
patches of the input and the model's prediction for the masked ones (``--raw``: the
model's output on every patch, as the paper's Figure 2 does). A model trained on
normalised pixels (``norm_pix``) predicts each patch without its mean and contrast:
they are taken from the image's visible patches (``--true-patch-stats``: from each
hidden patch itself, which shows its true colour; see ``MAEPretrainHead.reconstruct``).
``--json FILE`` writes the printed loss with the command, commit and machine
(``densevit.utils.provenance``).
"""
import argparse
import sys

import cv2
import torch
from mmengine.dataset import pseudo_collate

from densevit.analysis.inputs import add_image_figure_arguments
from densevit.apis import init_model
from densevit.checkpoint.model import CHECKPOINT_ERRORS
from densevit.models.selfsup.mae import MAE
from densevit.registry import DATASETS
from densevit.utils.provenance import add_json_argument, write_result
from densevit.visualization.reconstruction import reconstruction_figure


def dataset_cfg(cfg, folder):
    if folder:
        size = cfg.model.backbone.get('img_size', 224)
        return dict(type='UnlabelledImageDataset', data_root=folder, test_mode=True,
                    pipeline=[dict(type='LoadImage'),
                              dict(type='RandomResizedCrop', size=size, scale=(1.0, 1.0),
                                   ratio=(1.0, 1.0)),  # the largest centred square
                              dict(type='PackDetInputs')])
    for key in ('val_dataloader', 'test_dataloader'):
        if cfg.get(key):
            return cfg[key]['dataset']
    raise ValueError('the config has no val_dataloader or test_dataloader; give --folder DIR')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_image_figure_arguments(
        p, 'an MAE config (e.g. configs/mae/mae_vit_shapes_quickstart.py)',
        'its trained weights', 8, 'mae_reconstruction.png')
    p.add_argument('--seed', type=int, help="mask seed (default: the model's val_seed)")
    p.add_argument('--gap', type=int, default=2, help='white pixels between panels')
    p.add_argument('--raw', action='store_true',
                   help='the model output on every patch (no visible patches pasted back)')
    p.add_argument('--true-patch-stats', action='store_true',
                   help='norm_pix models: show each predicted patch with the hidden patch\'s '
                        'own mean and variance')
    add_json_argument(p, 'the mean loss on the masked patches')
    args = p.parse_args(argv)
    if args.num < 1:
        p.error(f'--num must be at least 1, got {args.num}')
    try:
        model = init_model(args.config, args.checkpoint)
        if not isinstance(model, MAE):
            raise ValueError(f'{type(model).__name__} does not reconstruct pixels; this tool '
                             f'shows MAE models')
        if args.seed is not None:
            model.val_seed = args.seed
        dataset = DATASETS.build(dataset_cfg(model.cfg, args.folder))
        data = pseudo_collate([dataset[i] for i in range(min(args.num, len(dataset)))])
        with torch.no_grad():
            data = model.data_preprocessor(data, False)
            inputs = data['inputs']
            out = model(inputs, data['data_samples'], mode='tensor')
            recon = model.head.reconstruct(out['pred'], inputs, out['mask'], paste=not args.raw,
                                           true_stats=args.true_patch_stats)
            loss = model.head.per_image_loss(out['pred'], inputs, out['mask']).mean()
    except (*CHECKPOINT_ERRORS, FileNotFoundError, ValueError) as e:
        print(f'densevit: {e}', file=sys.stderr)
        return 1
    dp = model.data_preprocessor
    normalised = getattr(dp, '_enable_normalize', False)
    h, w = inputs.shape[-2] // model.pixel_patch, inputs.shape[-1] // model.pixel_patch
    figure = reconstruction_figure(inputs, recon, out['mask'].reshape(-1, h, w), model.pixel_patch,
                                   dp.mean if normalised else None, dp.std if normalised else None,
                                   rgb=getattr(dp, '_channel_conversion', False), gap=args.gap)
    if not cv2.imwrite(args.out, figure):
        print(f'densevit: could not write {args.out}', file=sys.stderr)
        return 1
    print(f'wrote {args.out}: {len(inputs)} images (masked | reconstruction | original), '
          f'mean loss on their masked patches {float(loss):.4f}')
    if args.json:
        write_result(args.json, dict(masked_patch_loss=float(loss), num_images=len(inputs),
                                     seed=model.val_seed, figure=args.out),
                     config=args.config, checkpoint=args.checkpoint, folder=args.folder)
    return 0


if __name__ == '__main__':
    sys.exit(main())
