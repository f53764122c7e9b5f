"""``--resume`` continues the same run: refuse a checkpoint of another model or optimizer.

mmengine's ``resume`` loads the model non-strictly, logs "resumed", and only then does
the optimizer's ``load_state_dict`` fail (or, worse, succeed with moments of another
shape order) deep inside the first step. Here, before anything is loaded, the
checkpoint's state dict is compared strictly with the model (names and shapes), and its
optimizer state with the optimizer built from the config (number of parameter groups,
parameters per group, weight decay per group, shapes of the saved moments), since a
changed ``paramwise_cfg`` or layer decay regroups the parameters. A weight decay that a
parameter scheduler moves (DINO's cosine 0.04 -> 0.4) is compared at its start value, the
``initial_weight_decay`` mmengine's schedulers keep in each group. A difference raises
:class:`ResumeMismatchError` naming what changed; fine-tuning a changed model from the
file is ``load_from``, which the message says.
"""
from mmengine.model import is_model_wrapper

from densevit.checkpoint.match import CheckpointMismatchError

_SHOW = 5


class ResumeMismatchError(CheckpointMismatchError):
    """The checkpoint given to ``--resume`` was saved by another model or optimizer."""


def _listed(keys):
    keys = list(keys)
    return ', '.join(keys[:_SHOW]) + (f', ... ({len(keys)} in all)' if len(keys) > _SHOW else '')


def model_changes(model, state_dict):
    """Lines naming the tensors missing from, unexpected in, or of another shape in
    ``state_dict`` compared with ``model``'s own."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [f'{k} {tuple(state_dict[k].shape)} -> {tuple(own[k].shape)}'
              for k in own if k in state_dict and state_dict[k].shape != own[k].shape]
    lines = []
    if missing:
        lines.append(f'the model has tensors the checkpoint lacks: {_listed(missing)}')
    if unexpected:
        lines.append(f'the checkpoint has tensors the model lacks: {_listed(unexpected)}')
    if shapes:
        lines.append(f'tensors changed shape (checkpoint -> model): {_listed(shapes)}')
    return lines


def _start_decay(group):
    """A group's weight decay before any scheduler step (its current one if none moves it)."""
    return group.get('initial_weight_decay', group.get('weight_decay'))


def optimizer_changes(optimizer, saved, names):
    """Lines naming how ``saved`` (an ``optimizer.state_dict()``) differs from the groups of
    ``optimizer``; ``names`` maps a parameter's ``id`` to its name."""
    groups, saved_groups = optimizer.param_groups, saved.get('param_groups', [])
    if len(groups) != len(saved_groups):
        return [f'the optimizer has {len(groups)} parameter groups, the checkpoint\'s '
                f'{len(saved_groups)} (a changed paramwise_cfg or layer decay regroups them)']
    lines, state = [], saved.get('state', {})
    for i, (group, old) in enumerate(zip(groups, saved_groups, strict=True)):
        if len(group['params']) != len(old['params']):
            lines.append(f'parameter group {i} holds {len(group["params"])} parameters, the '
                         f'checkpoint\'s {len(old["params"])}')
            continue
        decay, old_decay = _start_decay(group), _start_decay(old)
        if decay != old_decay:
            lines.append(f'parameter group {i} ({names.get(id(group["params"][0]), "?")}, ...) '
                         f'has weight decay {decay}, the checkpoint\'s {old_decay}')
        for param, index in zip(group["params"], old["params"], strict=True):
            moments = {k: v for k, v in state.get(index, {}).items()
                       if hasattr(v, 'shape') and v.dim() > 0}
            wrong = [k for k, v in moments.items() if v.shape != param.shape]
            if wrong:
                lines.append(f'the optimizer state of {names.get(id(param), "?")} has shape '
                             f'{tuple(moments[wrong[0]].shape)}, the parameter '
                             f'{tuple(param.shape)}')
                break
    return lines


def check_resume(runner, checkpoint, filename, resume_optimizer=True):
    """Raise :class:`ResumeMismatchError` unless ``checkpoint`` continues ``runner``'s run."""
    model = runner.model.module if is_model_wrapper(runner.model) else runner.model
    lines = model_changes(model, checkpoint.get('state_dict', {}))
    saved = checkpoint.get('optimizer')
    wrapper = getattr(runner, 'optim_wrapper', None)
    if resume_optimizer and saved and hasattr(wrapper, 'optimizer'):
        names = {id(p): n for n, p in model.named_parameters()}
        lines += optimizer_changes(wrapper.optimizer, saved, names)
    if lines:
        raise ResumeMismatchError(
            f'--resume {filename}: the checkpoint was saved by another model or optimizer: '
            + '; '.join(lines) + '. --resume continues the same run; to start this changed '
            f'model from those weights, train with --cfg-options load_from={filename} '
            f'(without --resume): what fits is loaded and the rest reported.')
