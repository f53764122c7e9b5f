"""EoMT's mask annealing (Kerssies et al. 2025, Sec. 3.3): the probability that a query's
attention is masked in each of the last blocks, decayed from 1 to 0 during training so
that the trained model needs no masked attention (nor the intermediate predictions that
drive it) at inference.

Block b (0 = the first of the N blocks with queries) keeps probability 1 until iteration
``start[b]``, then decays polynomially, ``(1 - (t - start[b]) / (end[b] - start[b])) ** 0.9``,
and is 0 from ``end[b]`` on: the official trainer's rule (its ``mask_annealing``, applied
after every optimiser step with the number of steps done). Its configs stagger the blocks
over equal shares of training: with T iterations and N blocks, block b anneals from
``(b + 1) T / (N + 2)`` to ``(b + 2) T / (N + 2)`` (an ADE20K config of theirs, N = 4:
starts 6520, 13040, 19560, 26080 and ends 13040, ..., 32600, shares of T / 6 = 6520), so the
earliest block is unmasked first and the last ``T / (N + 2)`` iterations train without
masking.
"""


def annealed_probability(step, start, end, power=0.9):
    """The masking probability after ``step`` optimiser steps of a block annealed from
    ``start`` to ``end``: 1 before ``start``, 0 from ``end`` on, ``(1 - progress) ** power`` in
    between (progress = (step - start) / (end - start))."""
    if step < start:
        return 1.0
    if step >= end:
        return 0.0
    return (1.0 - (step - start) / (end - start)) ** power


def staggered_steps(total_iters, num_blocks):
    """The official configs' (start, end) iterations of each of ``num_blocks`` blocks for a
    training of ``total_iters``: block b from ``(b + 1) T / (N + 2)`` to ``(b + 2) T / (N + 2)``
    (rounded down)."""
    share = num_blocks + 2
    return ([(b + 1) * total_iters // share for b in range(num_blocks)],
            [(b + 2) * total_iters // share for b in range(num_blocks)])


def check_steps(start_iters, end_iters, num_blocks):
    """Refuse, naming them, start / end iterations not one per block or not increasing."""
    if len(start_iters) != num_blocks or len(end_iters) != num_blocks:
        raise ValueError(f'mask annealing: start_iters {list(start_iters)} and end_iters '
                         f'{list(end_iters)} need one entry per block with queries '
                         f'(num_blocks={num_blocks})')
    bad = [b for b, (s, e) in enumerate(zip(start_iters, end_iters, strict=True)) if e <= s]
    if bad:
        raise ValueError(f'mask annealing: block {bad[0]} ends (iteration {end_iters[bad[0]]}) '
                         f'no later than it starts ({start_iters[bad[0]]})')
