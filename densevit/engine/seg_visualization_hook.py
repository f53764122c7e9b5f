"""Draw segmentation predictions of validation / test images (``--show-dir``)."""
from densevit.engine.visualization_hook import DetVisualizationHook
from densevit.registry import HOOKS


@HOOKS.register_module()
class SegVisualizationHook(DetVisualizationHook):
    """:class:`DetVisualizationHook` for segmentation: gt | pred class maps over the image.

    Everything but the drawing is shared: which images, when, where the PNGs go
    (``test_out_dir``, set by ``tools/test.py --show-dir``), how the original image
    is read. The runner's visualizer (``SegLocalVisualizer`` in the segmentation
    runtime) does the drawing. The ground truth needs no mapping back: the test
    pipeline keeps label maps at the original image size, like the predictions.
    ``score_thr`` is accepted and unused.
    """
