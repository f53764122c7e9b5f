"""One-to-many supervision: H-DETR's hybrid matching (Jia et al. 2023).

Besides the Q one-to-one queries (Hungarian matching, one query per object, the only
ones used at inference), a training-only branch of Q' extra queries is matched to the
ground truth repeated k times, so up to k queries per object get a positive target:
many more positive gradients per image, the cause of DETR's slow convergence the paper
names. The branches share every weight; a self-attention mask keeps them apart, so the
one-to-one queries never learn to rely on the extra ones.

Decoder query axis: ``[DN queries | Q one-to-one | Q' one-to-many]``.
"""
import torch


def check_one_to_many(num_queries, k):
    """Raise ``ValueError`` naming the value unless both are positive integers."""
    for name, value in (('one_to_many.num_queries', num_queries), ('one_to_many.k', k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f'{name} must be an integer >= 1, got {value!r}')


def repeat_targets(targets, k):
    """Each image's ``labels`` [N] and ``boxes`` [N, 4] repeated k times -> [k·N(, 4)]."""
    return [dict(t, labels=t['labels'].repeat(k), boxes=t['boxes'].repeat(k, 1))
            for t in targets]


def hybrid_attn_mask(base, num_one_to_many, device):
    """The self-attention mask (True = blocked) with ``num_one_to_many`` queries appended.

    Args:
        base ([T, T] bool): the mask of the queries before them (DN + one-to-one, see
            ``denoising.py``; all False for one-to-one queries alone).
        num_one_to_many (int): Q' queries appended at the end.
        device: where to build it.

    Returns:
        [T + Q', T + Q'] bool: the old mask top-left; the new queries see only each other
        and no earlier query sees them.
    """
    T = base.shape[0]
    total = T + num_one_to_many
    mask = torch.zeros(total, total, dtype=torch.bool, device=device)
    mask[:T, :T] = base
    mask[:T, T:] = True
    mask[T:, :T] = True
    return mask
