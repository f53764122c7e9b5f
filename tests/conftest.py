"""Fixtures shared by the tests (models, checkpoint)."""
import logging

import pytest
from mmengine.logging import MMLogger


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
