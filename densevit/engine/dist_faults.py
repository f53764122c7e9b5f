"""What a process of a distributed run does when another one dies or hangs.

- A collective waits at most ``collective_timeout`` seconds for the other ranks
  (``DENSEVIT_DIST_TIMEOUT`` in the environment, else ``env_cfg.dist_cfg.timeout``,
  else 2 minutes with gloo on CPU), not torch's 30 minutes.
- A rank whose peer died (its connection closed) or stopped answering (the timeout)
  stops with :class:`PeerFailureError`: which rank is gone, at which iteration, the last
  complete checkpoint and ``--resume``, instead of gloo's raw error.
- Under torchrun, which stops every process with SIGTERM once one fails, each stopped
  rank prints one line saying so before it dies by the signal.
"""
import os
import signal
import sys

import torch.distributed as dist

TIMEOUT_ENV = 'DENSEVIT_DIST_TIMEOUT'
GLOO_TIMEOUT_S = 120.0
# gloo's words for a peer whose socket closed, and for a wait that ran out
_CLOSED = ('connection closed by peer', 'connection reset by peer', 'broken pipe',
           'connection refused')
_TIMED_OUT = ('timed out', 'timeout')


class PeerFailureError(RuntimeError):
    """Another process of the distributed run died or stopped answering."""


def collective_timeout(cfg, default=None):
    """Seconds a collective may wait for the other ranks, or ``default`` when unset.

    ``DENSEVIT_DIST_TIMEOUT`` wins over the config's ``env_cfg.dist_cfg.timeout``
    (mmengine's key, also in seconds)."""
    source, raw = TIMEOUT_ENV, os.environ.get(TIMEOUT_ENV)
    if raw is None:
        source = 'env_cfg.dist_cfg.timeout'
        raw = ((cfg.get('env_cfg') or {}).get('dist_cfg') or {}).get('timeout')
    if raw is None:
        return default
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f'{source} must be a number of seconds, got {raw!r}') from None
    if not seconds > 0:
        raise ValueError(f'{source} must be a positive number of seconds, got {raw!r}')
    return seconds


def _what_to_do(work_dir):
    from densevit.engine.checkpoint_hook import read_last_checkpoint
    ckpt = read_last_checkpoint(work_dir)
    if ckpt is None:
        return 'No checkpoint was saved yet: start the run again.'
    return (f'The last complete checkpoint is {ckpt}: run the same command again with '
            f'--resume to continue from it.')


def _peers(rank, world):
    return f'rank {1 - rank}' if world == 2 else f'one of the other {world - 1} ranks'


def explain_peer_failure(exc, iteration, work_dir, timeout=None):
    """A :class:`PeerFailureError` for a gloo error meaning a peer is gone, else None."""
    if not isinstance(exc, RuntimeError) or not (dist.is_available() and dist.is_initialized()):
        return None
    text = str(exc).lower()
    if not (isinstance(exc, dist.DistError) or 'gloo' in text):
        return None
    rank, world = dist.get_rank(), dist.get_world_size()
    where = f'rank {rank} of {world}, at iteration {iteration}'
    if any(s in text for s in _CLOSED):
        what = (f'{where}: {_peers(rank, world)} is gone (its connection closed: the process '
                f'died or was killed; its own log or the launcher says why).')
    elif any(s in text for s in _TIMED_OUT):
        limit = f'{timeout:g} s' if timeout else 'the collective timeout'
        what = (f'{where}: no answer from {_peers(rank, world)} within {limit} (it hangs, or '
                f'died without closing its connection). A rank that legitimately works alone '
                f'for longer (a big COCO evaluation, a slow save) needs a larger '
                f'{TIMEOUT_ENV} or env_cfg.dist_cfg.timeout (seconds).')
    else:
        return None
    detail = str(exc).split(' This is typically')[0][:300]  # gloo's advice: checked above
    return PeerFailureError(f'{what} {_what_to_do(work_dir)} (gloo: {detail})')


def note_sigterm(work_dir):
    """Install a SIGTERM handler that prints why this rank stops, then dies by SIGTERM as
    it would have; returns the previous handler (for :func:`signal.signal`)."""
    pid = os.getpid()

    def on_sigterm(signum, frame):
        if os.getpid() == pid:  # not in a forked DataLoader worker
            rank = dist.get_rank() if dist.is_initialized() else os.environ.get('RANK', '?')
            sys.stderr.write(
                f'densevit: rank {rank} stopped by SIGTERM: torchrun stops every process once '
                f'one fails (its report names the rank that failed first); a scheduler sends it '
                f'at a time limit. {_what_to_do(work_dir)}\n')
            sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return signal.signal(signal.SIGTERM, on_sigterm)
