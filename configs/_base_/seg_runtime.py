# Runtime for segmentation: default_runtime.py with the segmentation visualizer and
# hook (tools/test.py --show-dir draws gt | pred class maps), iteration-based logging.
_base_ = ['./default_runtime.py']

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=16000, max_keep_ckpts=3),
    visualization=dict(type='SegVisualizationHook'))
visualizer = dict(type='SegLocalVisualizer', alpha=0.5)
log_processor = dict(by_epoch=False)
