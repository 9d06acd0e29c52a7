"""k-means as compression needs it: many small independent problems solved together.

``kmeans_1d`` clusters scalars group by group (one codebook per layer or per output channel);
``kmeans_vectors`` clusters rows (filters) batch by batch (NNM). Both take an explicit initial
centroid array for warm starts (CPT re-clusters every few steps from the previous solution), and
both are exact when a group already has no more distinct values than clusters (a model that was
fine-tuned to its centroids packs without any further error).
"""
from __future__ import annotations

import numpy as np

INITS = ("linear", "kmeans++")
_SEED_SAMPLE = 65536


def kmeans_1d(values: np.ndarray, k: int, *, mask: np.ndarray | None = None, init: str | np.ndarray = "linear",
              iters: int = 30, tol: float = 1e-5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Cluster each row of ``values`` (G, n) into ``k`` centroids.

    ``mask`` (G, n) marks the entries that take part (others get arbitrary indices). Stops when
    assignments settle or no centroid moves by more than ``tol`` x the value range. Returns the
    codebook (G, k) float32, sorted ascending per row, and indices (G, n) int64.
    """
    x = np.asarray(values, dtype=np.float64)
    m = np.ones_like(x, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    g = x.shape[0]
    centroids = _init_1d(x, m, k, init, seed)
    for row in range(g):  # already quantised to <= k levels: take them exactly
        levels = np.unique(x[row, m[row]])
        if 0 < levels.size <= k:
            centroids[row] = np.concatenate([levels, np.full(k - levels.size, levels[-1])])
    idx = None
    for _ in range(iters):
        new_idx = _nearest_sorted(x, centroids)
        if idx is not None and np.array_equal(new_idx, idx):
            break
        idx = new_idx
        flat = (np.arange(g)[:, None] * k + idx)[m]
        sums = np.bincount(flat, weights=x[m], minlength=g * k).reshape(g, k)
        counts = np.bincount(flat, minlength=g * k).reshape(g, k)
        updated = np.sort(np.where(counts > 0, sums / np.maximum(counts, 1), centroids), axis=1)
        moved = np.abs(updated - centroids).max(initial=0.0)
        centroids = updated
        if moved <= tol * (np.ptp(x) if x.size else 0.0):
            break
    idx = _nearest_sorted(x, centroids)
    return centroids.astype(np.float32), idx


def _init_1d(x: np.ndarray, m: np.ndarray, k: int, init: str | np.ndarray, seed: int) -> np.ndarray:
    g = x.shape[0]
    if isinstance(init, np.ndarray):
        return np.sort(np.asarray(init, dtype=np.float64).reshape(g, k), axis=1)
    lo = np.where(m, x, np.inf).min(axis=1, initial=np.inf)
    hi = np.where(m, x, -np.inf).max(axis=1, initial=-np.inf)
    lo, hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 0.0)
    if init == "linear":  # Han et al.: evenly spaced between the extremes
        return lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, k)[None, :]
    if init != "kmeans++":
        raise ValueError(f"unknown k-means init {init!r}; choose one of {INITS}")
    rng = np.random.default_rng(seed)
    if x.shape[1] > _SEED_SAMPLE:  # seeding from a sample is as good and O(k * sample)
        cols = rng.choice(x.shape[1], _SEED_SAMPLE, replace=False)
        x, m = x[:, cols], m[:, cols]
    chosen = np.empty((g, k))
    weights = m.astype(np.float64)
    chosen[:, 0] = x[np.arange(g), _sample_rows(weights, rng)]
    dist = np.where(m, (x - chosen[:, :1]) ** 2, 0.0)
    for j in range(1, k):  # D^2 sampling, all groups at once
        pick = _sample_rows(np.where(dist.sum(axis=1, keepdims=True) > 0, dist, weights), rng)
        chosen[:, j] = x[np.arange(g), pick]
        dist = np.minimum(dist, np.where(m, (x - chosen[:, j:j + 1]) ** 2, 0.0))
    return np.sort(chosen, axis=1)


def _sample_rows(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column index per row, drawn with probability proportional to ``weights``."""
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1:]
    u = rng.random((weights.shape[0], 1)) * np.where(total > 0, total, 1)
    return np.minimum((cum <= u).sum(axis=1), weights.shape[1] - 1) if weights.shape[1] else np.zeros(0, int)


def _nearest_sorted(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid per element; centroids sorted per row. Vectorised over rows
    by shifting each row into its own disjoint interval of one global search."""
    g, k = centroids.shape
    if k == 1:
        return np.zeros(x.shape, dtype=np.int64)
    mids = (centroids[:, 1:] + centroids[:, :-1]) / 2
    lo = min(x.min(initial=0.0), centroids.min(initial=0.0))
    hi = max(x.max(initial=0.0), centroids.max(initial=0.0))
    stride = (hi - lo) * 2 + 1.0
    offsets = np.arange(g)[:, None] * stride
    flat = np.searchsorted((mids + offsets).reshape(-1), (x + offsets).reshape(-1), side="left")
    return flat.reshape(x.shape) - np.arange(g)[:, None] * (k - 1)


def kmeans_vectors(x: np.ndarray, k: int, *, init: str | np.ndarray = "kmeans++", iters: int = 50,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Cluster the rows of each batch of ``x`` (B, N, D) into ``k`` centroids.

    Returns centroids (B, k, D) float32 and assignments (B, N) int64. Empty clusters are re-seeded
    with the point farthest from its centroid.
    """
    x = np.asarray(x, dtype=np.float64)
    b, n, d = x.shape
    k = min(k, n)
    centroids = _init_vectors(x, k, init, seed)
    for batch in range(b):  # already <= k distinct rows: exact
        rows = np.unique(x[batch], axis=0)
        if rows.shape[0] <= k:
            centroids[batch] = np.concatenate([rows, np.repeat(rows[-1:], k - rows.shape[0], axis=0)])
    assign = None
    for _ in range(iters):
        dist = _sq_dist(x, centroids)
        new_assign = dist.argmin(axis=2)
        if assign is not None and np.array_equal(new_assign, assign):
            break
        assign = new_assign
        onehot = np.zeros((b, n, k))
        np.put_along_axis(onehot, assign[:, :, None], 1.0, axis=2)
        counts = onehot.sum(axis=1)  # (B, k)
        sums = np.einsum("bnk,bnd->bkd", onehot, x)
        centroids = np.where(counts[:, :, None] > 0, sums / np.maximum(counts, 1)[:, :, None], centroids)
        for batch, cluster in zip(*np.nonzero(counts == 0)):  # re-seed empty clusters
            far = dist[batch, np.arange(n), assign[batch]].argmax()
            centroids[batch, cluster] = x[batch, far]
    assign = _sq_dist(x, centroids).argmin(axis=2)
    return centroids.astype(np.float32), assign


def _sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    return ((x ** 2).sum(axis=2)[:, :, None] - 2 * np.einsum("bnd,bkd->bnk", x, c)
            + (c ** 2).sum(axis=2)[:, None, :])


def _init_vectors(x: np.ndarray, k: int, init: str | np.ndarray, seed: int) -> np.ndarray:
    b, n, d = x.shape
    if isinstance(init, np.ndarray):
        return np.asarray(init, dtype=np.float64).reshape(b, k, d).copy()
    rng = np.random.default_rng(seed)
    if init == "linear":  # deterministic spread: evenly spaced rows of the norm-sorted data
        order = np.argsort(np.linalg.norm(x, axis=2), axis=1)
        pick = order[:, np.linspace(0, n - 1, k).round().astype(int)]
        return np.take_along_axis(x, pick[:, :, None], axis=1)
    if init != "kmeans++":
        raise ValueError(f"unknown k-means init {init!r}; choose one of {INITS}")
    centroids = np.empty((b, k, d))
    centroids[:, 0] = x[np.arange(b), rng.integers(0, n, b)]
    dist = ((x - centroids[:, :1]) ** 2).sum(axis=2)
    for j in range(1, k):
        pick = _sample_rows(dist if dist.sum() > 0 else np.ones_like(dist), rng)
        centroids[:, j] = x[np.arange(b), pick]
        dist = np.minimum(dist, ((x - centroids[:, j:j + 1]) ** 2).sum(axis=2))
    return centroids
