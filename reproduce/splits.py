"""The splits the exact permutation test (stats.permutation_p) counts: every split of the pooled runs listed once per
size (split_table), one split's difference of means on correctly rounded sums (split_diff), and the splits counted in
bulk on float sums with a margin that decides each as the correctly rounded sums would (split_hits)."""
from __future__ import annotations

from functools import lru_cache
from itertools import chain, combinations
from math import fsum

import numpy as np

SPLIT_CHUNK = 1 << 15  # splits summed at once by permutation_p
KEPT_SPLITS = 200_000  # split_table's largest table: C(20, 10) = 184,756 splits of 10 indices, 15 MB


@lru_cache(maxsize=2)
def split_table(total: int, na: int) -> np.ndarray:
    """Every split of range(total) into a first group of na, as rows of its indices in combinations' order (read
    only): made once for the many tests of one size."""
    table = np.fromiter(chain.from_iterable(combinations(range(total), na)), dtype=np.intp).reshape(-1, na)
    table.flags.writeable = False
    return table


def split_diff(x: np.ndarray, idx, na: int, nb: int) -> float:
    """The difference of means of one split of the pooled x: the n_a values at idx against the n_b others, on
    correctly rounded group sums (math.fsum)."""
    mask = np.zeros(len(x), dtype=bool)
    mask[list(idx)] = True
    return fsum(x[mask]) / na - fsum(x[~mask]) / nb


def split_hits(x: np.ndarray, idx: np.ndarray, nb: int, least: float) -> int:
    """How many of the splits (rows of idx: the first group's indices into x) have |split_diff| >= least.

    The group sums are plain float sums here. Each differs from math.fsum's by less than (2 n + 2) u sum|x| (n the
    pooled count, u = 2^-53: the bound of recursive summation, the rounding of the correctly rounded sum and of the
    second group's sum taken as the total minus the first), and the difference of means then by less than
    (2 n + 8) u sum|x| (1/n_a + 1/n_b) with the divisions and the subtraction. Twice that is the margin: a split whose
    float |diff| is that far from `least` or more is decided as fsum's would be, and the few within the margin (ties:
    the observed split's mirror, groups of equal sums; NaN) are computed again with split_diff. Integers whose
    absolute sum is below 2^53 sum exactly in any order: there the float differences are fsum's, no margin."""
    na, scale = idx.shape[1], np.abs(x).sum()
    sa = x[idx].sum(axis=1)
    d = np.abs(sa / na - (x.sum() - sa) / nb)
    exact = scale < 2.0 ** 53 and np.all(x == np.round(x))
    margin = 0.0 if exact else (2 * len(x) + 8) * np.finfo(float).eps * scale * (1 / na + 1 / nb)
    sure = d >= least + margin
    unsure = np.flatnonzero(~sure & ~(d < least - margin))
    return int(sure.sum()) + sum(abs(split_diff(x, idx[i], na, nb)) >= least for i in unsure)
