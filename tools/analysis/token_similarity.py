"""How far each ViT layer's patch tokens share one vector (a representation check).

    python tools/analysis/token_similarity.py CONFIG CHECKPOINT [IMAGES...] --num-images 16

Prints, per layer, the mean token length, the mean cosine similarity of two patches
of one image, the share of the tokens' energy in their common vector, and that share for
what the layer's attention and MLP branches add (near 1: a dead layer), and writes
``token_similarity.json`` in ``--out-dir`` (or ``--json FILE``; with the command, commit,
CPU and thread count: ``densevit.utils.provenance``; the numbers:
``densevit.analysis.token_similarity``). CHECKPOINT may be a
pre-training one (MAE, masked patch prediction) with its own config, or ``none``.
"""

from densevit.analysis.cli import Timer, base_parser, setup, write_json
from densevit.analysis.inputs import default_image_size, load_images, to_tensor
from densevit.analysis.token_similarity import layer_token_statistics


def main():
    p = base_parser(__doc__.splitlines()[0], images=True, num_images=16)
    args = p.parse_args()
    model, vit = setup(args)
    size = tuple(args.img_size) if args.img_size else default_image_size(vit)
    images = load_images(args.images, args.num_images, size)
    with Timer() as t:
        rows = layer_token_statistics(vit, to_tensor(images, model.cfg, args.device))
    print(f'{len(images)} images of {size[0]}x{size[1]}, {t.seconds:.1f} s')
    print('| layer | token norm | cosine of two patches | common share | attention adds, '
          'common share | MLP adds, common share |\n|---|---|---|---|---|---|')
    for i, r in enumerate(rows):
        print(f"| {i} | {r['norm']:.2f} | {r['cosine']:.3f} | {r['common']:.3f} | "
              f"{r['attn_common']:.3f} | {r['mlp_common']:.3f} |")
    js = write_json(args, 'token_similarity.json',
                    dict(layers=rows, num_images=len(images), image_size=list(size),
                         seconds=round(t.seconds, 2), cpu_seconds=round(t.cpu_seconds, 2)))
    print(js)


if __name__ == '__main__':
    main()
