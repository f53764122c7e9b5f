"""Matplotlib (Agg) figures of the ViT analysis tools; each returns the saved path."""
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _save(fig, path):
    fig.savefig(path, dpi=120, bbox_inches='tight')
    plt.close(fig)
    return path


def plot_similarity_grid(grid, path, title='', cbar_label='cosine similarity'):
    """grid [h, w, h, w] -> an h x w mosaic of h x w tiles (ViT paper, Fig. 7 centre)."""
    grid = np.asarray(grid)
    h, w = grid.shape[:2]
    vmin, vmax = float(grid.min()), float(grid.max())
    fig, axes = plt.subplots(h, w, figsize=(0.6 * w + 1, 0.6 * h), squeeze=False)
    for i in range(h):
        for j in range(w):
            ax = axes[i, j]
            im = ax.imshow(grid[i, j], vmin=vmin, vmax=vmax, cmap='viridis')
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(str(i + 1), fontsize=6)
            if i == h - 1:
                ax.set_xlabel(str(j + 1), fontsize=6)
    fig.supxlabel('input patch column')
    fig.supylabel('input patch row')
    fig.suptitle(title)
    fig.colorbar(im, ax=axes, shrink=0.6, label=cbar_label)
    return _save(fig, path)


def plot_attention_distance(dist, path, patch_size, title=''):
    """dist [L, heads] pixels -> scatter of heads against depth (ViT paper, Fig. 7 right)."""
    dist = np.asarray(dist)
    L, H = dist.shape
    fig, ax = plt.subplots(figsize=(5, 4))
    for h in range(H):
        ax.scatter(np.arange(L), dist[:, h], s=12, label=f'head {h}')
    ax.set_xlabel('network depth (layer)')
    ax.set_ylabel('mean attention distance (pixels)')
    ax.set_xticks(np.arange(L))
    ax.set_title(title or f'mean attention distance (patch {patch_size} px)')
    if H <= 16:
        ax.legend(fontsize=6, ncol=2)
    return _save(fig, path)


def plot_filters(tiles, path, title='', cols=7):
    """tiles [k, C, P, P] in [0, 1] -> grid of RGB (or grey) tiles (ViT paper, Fig. 7 left)."""
    tiles = np.asarray(tiles)
    k = tiles.shape[0]
    rows = -(-k // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 0.9, rows * 0.9), squeeze=False)
    for n, ax in enumerate(axes.flat):
        ax.axis('off')
        if n < k:
            t = tiles[n]
            ax.imshow(t.transpose(1, 2, 0) if t.shape[0] == 3 else t[0], cmap='gray',
                      interpolation='nearest')
    fig.suptitle(title)
    return _save(fig, path)


def overlay_maps(img_rgb, maps, path, boxes=None, titles=None, alpha=0.5):
    """Image with one heat map per panel; maps [k, H, W] at image resolution in [0, 1]."""
    k = len(maps)
    fig, axes = plt.subplots(1, k + 1, figsize=(2.6 * (k + 1), 2.8), squeeze=False)
    axes[0, 0].imshow(img_rgb)
    axes[0, 0].set_title('image', fontsize=8)
    for n in range(k):
        ax = axes[0, n + 1]
        ax.imshow(img_rgb)
        ax.imshow(maps[n], cmap='jet', alpha=alpha)
        if boxes is not None:
            x1, y1, x2, y2 = boxes[n]
            ax.add_patch(plt.Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, color='white',
                                       lw=1.5))
        if titles is not None:
            ax.set_title(titles[n], fontsize=8)
    for ax in axes.flat:
        ax.axis('off')
    return _save(fig, path)
