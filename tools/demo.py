"""Draw a model's predictions on images or a video.

    python tools/demo.py INPUT CONFIG CHECKPOINT --out-dir DIR [--score-thr 0.3] [--device cpu]

INPUT is an image, a folder of images, or a video file. Images give
``DIR/<name>.png``; a video gives ``DIR/<name>.mp4`` (or ``DIR/<name>/%06d.png``
with ``--frames``, or when this OpenCV build cannot encode video). Boxes are
drawn by the config's visualizer (``DetLocalVisualizer``), class maps by
``SegLocalVisualizer``.
"""
import argparse
import os
import os.path as osp
import sys
from pathlib import Path

import cv2
from mmengine.config import DictAction
from mmengine.registry import DefaultScope

from densevit.apis import inference, init_model
from densevit.registry import VISUALIZERS
from densevit.visualization.sample_drawing import KINDS

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp')
VIDEO_EXTS = ('.mp4', '.avi', '.mov', '.mkv', '.webm', '.mpg', '.mpeg')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='Draw predictions on images or a video')
    p.add_argument('input', help='image file, folder of images, or video file')
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--out-dir', required=True, help='where the drawings go')
    p.add_argument('--score-thr', type=float, default=0.3, help='boxes below are not drawn')
    p.add_argument('--device', default='cpu')
    p.add_argument('--frames', action='store_true', help='video: write PNG frames, not a video')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    return p.parse_args(argv)


def build_visualizer(model):
    """The config's visualizer, drawing to arrays only (no vis backends)."""
    cfg = dict(model.cfg.visualizer)
    cfg.update(name=f'densevit_demo_{os.getpid()}_{id(model)}', vis_backends=None, save_dir=None)
    with DefaultScope.overwrite_default_scope(model.cfg.get('default_scope', 'densevit')):
        visualizer = VISUALIZERS.build(cfg)
    visualizer.dataset_meta = model.dataset_meta
    return visualizer


def draw(visualizer, image_bgr, sample, score_thr):
    """Predictions of ``sample`` drawn over ``image_bgr``; returns BGR uint8."""
    rgb = image_bgr[..., ::-1].copy()
    if not any(k in sample for k in ('pred_instances', 'pred_sem_seg', 'pred_panoptic_seg')):
        raise KeyError('the model returned none of pred_instances, pred_sem_seg and '
                       'pred_panoptic_seg')
    # the richest drawing the prediction holds: panoptic segments, instance masks, boxes or
    # the class map, at the image's own size
    drawn = visualizer.draw_panel(rgb, sample, 'pred', KINDS[-1], score_thr)
    return drawn[..., ::-1]


def run_images(paths, model, visualizer, out_dir, score_thr):
    written = []
    for path in paths:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f'cannot read image: {path}')
        sample = inference(model, image)
        out = osp.join(out_dir, Path(path).stem + '.png')
        cv2.imwrite(out, draw(visualizer, image, sample, score_thr))
        written.append(out)
    return written


def run_video(path, model, visualizer, out_dir, score_thr, frames=False):
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f'cannot open video: {path}')
    fps = cap.get(cv2.CAP_PROP_FPS) or 25.0
    stem, writer, frame_dir, count = Path(path).stem, None, None, 0
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            drawn = draw(visualizer, frame, inference(model, frame), score_thr)
            if writer is None and not frames:
                h, w = drawn.shape[:2]
                writer = cv2.VideoWriter(osp.join(out_dir, stem + '.mp4'),
                                         cv2.VideoWriter_fourcc(*'mp4v'), fps, (w, h))
                if not writer.isOpened():
                    print('densevit: this OpenCV cannot write mp4; writing frames instead',
                          file=sys.stderr)
                    writer, frames = None, True
            if frames:
                frame_dir = frame_dir or osp.join(out_dir, stem)
                os.makedirs(frame_dir, exist_ok=True)
                cv2.imwrite(osp.join(frame_dir, f'{count:06d}.png'), drawn)
            else:
                writer.write(drawn)
            count += 1
    finally:
        cap.release()
        if writer is not None:
            writer.release()
    if count == 0:
        raise ValueError(f'no frames could be read from {path}')
    return [frame_dir if frames else osp.join(out_dir, stem + '.mp4')]


def main(argv=None):
    args = parse_args(argv)
    src = Path(args.input)
    if not src.exists():
        print(f'densevit: input not found: {src}', file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    model = init_model(args.config, args.checkpoint, device=args.device,
                       cfg_options=args.cfg_options)
    visualizer = build_visualizer(model)
    if src.is_dir():
        paths = sorted(p for p in src.iterdir() if p.suffix.lower() in IMAGE_EXTS)
        written = run_images(paths, model, visualizer, args.out_dir, args.score_thr)
    elif src.suffix.lower() in VIDEO_EXTS:
        written = run_video(src, model, visualizer, args.out_dir, args.score_thr, args.frames)
    else:
        written = run_images([src], model, visualizer, args.out_dir, args.score_thr)
    print(f'densevit: wrote {len(written)} file(s) to {args.out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
