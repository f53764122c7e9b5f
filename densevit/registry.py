"""densevit's registries: children of mmengine's root registries, scope ``densevit``.

Every registry imports its modules lazily (mmengine ``locations``) the first time
something is built or looked up in scope ``densevit``, so a config only names a
``type`` and no module needs importing by hand. The module lists are read from
the source tree, so a new file under a listed package registers itself.
"""
from pathlib import Path

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOG_PROCESSORS as MMENGINE_LOG_PROCESSORS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry

_ROOT = Path(__file__).parent


def _modules(*packages):
    """Dotted names of every module under ``densevit/<package>`` (found on disk)."""
    names = []
    for package in packages:
        for path in sorted((_ROOT / package).rglob('*.py')):
            if path.name == '__init__.py':
                continue
            rel = path.relative_to(_ROOT.parent).with_suffix('')
            names.append('.'.join(rel.parts))
    return names


def _child(name, parent, *packages):
    return Registry(name, parent=parent, scope='densevit', locations=_modules(*packages))


RUNNERS = _child('runner', MMENGINE_RUNNERS, 'engine')
LOOPS = _child('loop', MMENGINE_LOOPS, 'engine')
HOOKS = _child('hook', MMENGINE_HOOKS, 'engine')
LOG_PROCESSORS = _child('log processor', MMENGINE_LOG_PROCESSORS, 'engine')
OPTIMIZERS = _child('optimizer', MMENGINE_OPTIMIZERS, 'engine')
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS, 'engine')
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, 'engine')
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS, 'engine')
DATASETS = _child('dataset', MMENGINE_DATASETS, 'datasets')
DATA_SAMPLERS = _child('data sampler', MMENGINE_DATA_SAMPLERS, 'datasets')
TRANSFORMS = _child('transform', MMENGINE_TRANSFORMS, 'datasets')
MODELS = _child('model', MMENGINE_MODELS, 'models')
MODEL_WRAPPERS = _child('model_wrapper', MMENGINE_MODEL_WRAPPERS, 'models', 'engine')
WEIGHT_INITIALIZERS = _child('weight initializer', MMENGINE_WEIGHT_INITIALIZERS, 'models')
TASK_UTILS = _child('task util', MMENGINE_TASK_UTILS, 'models')
METRICS = _child('metric', MMENGINE_METRICS, 'evaluation')
EVALUATOR = _child('evaluator', MMENGINE_EVALUATOR, 'evaluation')
VISUALIZERS = _child('visualizer', MMENGINE_VISUALIZERS, 'visualization')
VISBACKENDS = _child('vis_backend', MMENGINE_VISBACKENDS, 'visualization')
