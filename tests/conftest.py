"""Fixtures shared by the tests (models, checkpoint)."""
import logging

import pytest
from mmengine.logging import MMLogger

from tiny_checkpoints import trained_checkpoint


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
