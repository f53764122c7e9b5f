"""Fixtures shared by the tests (models, checkpoint); the ``cuda_path`` marker."""
import logging
from pathlib import Path

import pytest
from mmengine.logging import MMLogger

from tiny_checkpoints import trained_checkpoint

# Test modules whose code runs differently on a machine with a CUDA GPU: they train or test
# through mmengine's Runner (which moves the model to the GPU), tools/train.py / test.py /
# dist_*.sh, the AMP optimiser wrapper, the launcher, or init_model / inference on a device.
# Marked ``cuda_path`` (pytest.ini) so that tools/dev/gpu_check.sh runs them first on a GPU.
CUDA_PATH = (
    'apis/test_bf16_inference.py', 'apis/test_inference.py',
    'checkpoint/test_mae_checkpoints.py', 'checkpoint/test_model_checkpoint.py',
    'checkpoint/test_openmmlab_deformable_detr.py', 'checkpoint/test_openmmlab_segformer.py',
    'checkpoint/test_openmmlab_swin.py', 'configs/test_all_configs.py',
    'configs/test_eomt_config.py', 'configs/test_mask2former_config.py',
    'datasets/test_seg_transforms.py', 'deploy/test_export_cli.py',
    'deploy/test_export_matches_pytorch.py', 'deploy/test_mixed_size_batches_onnx.py',
    'deploy/test_test_tool_backend.py', 'engine/test_distributed.py', 'engine/test_resume.py',
    'engine/test_training_clock.py', 'engine/test_training_features.py',
    'faults/test_checkpoint_faults.py', 'faults/test_config_faults.py',
    'faults/test_dataset_check.py', 'faults/test_deploy_faults.py',
    'faults/test_distributed_faults.py', 'faults/test_inference_input.py',
    'faults/test_large_images.py', 'faults/test_mixed_size_batches.py',
    'faults/test_nonfinite_loss.py', 'faults/test_unreadable_images.py',
    'faults/test_url_checkpoints.py', 'faults/test_work_dir_faults.py',
    'models/test_criterion_dtypes.py', 'models/test_eomt_vs_hf.py',
    'models/test_mask2former_vs_hf.py',
    'tools/test_bench_detr_peers.py',
    'tools/test_bench_gpu_peers.py', 'tools/test_bf16_test_tool.py',
    'tools/test_demo_and_analysis.py', 'tools/test_eval_results.py', 'tools/test_get_flops.py',
    'tools/test_json_outputs.py', 'tools/test_launch_scripts.py', 'tools/test_mae_tools.py',
    'tools/test_run_seeds.py', 'tools/test_seg_tools.py', 'tools/test_train_test_tools.py',
    'tools/test_tta_tool.py')
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    missing = [p for p in CUDA_PATH if not (TESTS / p).is_file()]
    if missing:
        raise pytest.UsageError(f'tests/conftest.py CUDA_PATH names no such file: {missing}')
    marked = {str(TESTS / p) for p in CUDA_PATH}
    for item in items:
        if str(item.path) in marked:
            item.add_marker(pytest.mark.cuda_path)


@pytest.fixture
def log_lines():
    """Messages (level, text) that densevit logs through mmengine's current logger."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append((r.levelno, r.getMessage()))
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture(scope='module')
def det(tmp_path_factory):
    """The tiny trained detector of the session (tests/tools/tiny_checkpoints.py)."""
    return trained_checkpoint(tmp_path_factory, 'det')


@pytest.fixture(scope='module')
def seg(tmp_path_factory):
    """The tiny trained segmentor of the session (tests/tools/tiny_checkpoints.py)."""
    return trained_checkpoint(tmp_path_factory, 'seg')
