"""Drawing colours: one per class (the dataset's palette, else generated), shaded per
instance so that two segments of one class differ."""
import colorsys


def class_palette(num_classes):
    """``num_classes`` distinct RGB tuples (0-255), the same on every run.

    Hues step by the golden ratio so that neighbouring labels get far-apart colors.
    """
    colors = []
    for i in range(num_classes):
        r, g, b = colorsys.hsv_to_rgb((i * 0.618033988749895) % 1.0, 0.85, 0.95)
        colors.append((int(r * 255), int(g * 255), int(b * 255)))
    return colors


def shade(color, rank):
    """The colour of the ``rank``-th segment (0, 1, ...) of a class whose colour is ``color``
    (RGB 0-255): rank 0 the colour itself, then alternately darker and lighter, moved 25-60%
    of the way to black / white (a different step for each rank)."""
    if rank == 0:
        return tuple(int(c) for c in color)
    amount = 0.25 + 0.35 * ((rank * 0.618033988749895) % 1.0)
    target = 0 if rank % 2 else 255
    return tuple(int(round(c + (target - c) * amount)) for c in color)


def segment_colors(labels, palette):
    """Class labels [N] of N segments -> N RGB tuples: each label's ``palette`` colour,
    :func:`shade`-d by how many segments of that label come before it (stuff, one segment
    a class, keeps the class colour; the instances of a class get one shade each)."""
    seen, colors = {}, []
    for label in labels:
        rank = seen.get(int(label), 0)
        seen[int(label)] = rank + 1
        colors.append(shade(palette[int(label)], rank))
    return colors
