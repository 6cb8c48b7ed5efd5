"""The report's building blocks: the Frame every section reads, the number formats, markdown tables, and the
parts every per-seed metric's section (sections.metric_section) is made of: the table of per-seed values, the
best-of-all and pairwise counts, the differences of each compared pair. They format what stats.compare computed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .measures import runs_of
from .runs import reached
from .stats import IQM_TRIMS_FROM, Compared, Difference, Seeds


@dataclass(frozen=True)
class Frame:
    """What every section of one report reads: the runs data[label][game][seed] (the reference label first), the
    games reported and the compared pairs (A, baseline B)."""
    data: dict
    games: list
    pairs: list

    @property
    def labels(self) -> list[str]:
        return list(self.data)

    @property
    def complete(self) -> list[str]:
        """The games every label ran."""
        return [g for g in self.games if all(g in d for d in self.data.values())]

    @property
    def at(self) -> str:
        """" at 2,000,000 of 20,000,000 steps" when the runs are prefixes (--stop-at-step) that stopped at one step
        of one protocol, " at each run's stop (see Data)" when they stopped at several, "" when every run is complete:
        the heading suffix of every number read at a run's end."""
        runs = runs_of(self.data, self.games)
        if all(r.complete for r in runs):
            return ""
        stops = {reached(r) for r in runs}
        return f" at {stops.pop()}" if len(stops) == 1 else " at each run's stop (see Data)"


def fmt(x: float) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def fmt_pct(x: float) -> str:
    """A rate in %, at one decimal whatever its size (fmt gives three decimals below 10: 9.921% beside 32.5%)."""
    return f"{x:.1f}%" if x is not None and np.isfinite(x) else "–"


def fmt_points(x: float) -> str:
    """A difference of two rates in percentage points, signed, at one decimal ("+23.5", "-0.4", "0.0")."""
    if x is None or not np.isfinite(x):
        return "–"
    return f"{x:+.1f}" if round(x, 1) != 0 else "0.0"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def fmt_p(p: float) -> str:
    if p is None or not np.isfinite(p):
        return "–"
    return f"{p:.2f}" if p >= 0.095 else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def marked(text: str | None, is_best: bool) -> str:
    return "missing" if text is None else (f"**{text}**" if is_best else text)


def min_p_statement(na: int, nb: int, p: float, splits: int, alpha: float = 0.05) -> str:
    """The plain reading of stats.min_permutation_p's p with n_a vs n_b runs (splits: their C(n_a + n_b, n_a)
    relabellings): whether any difference can reach p < alpha with these counts."""
    head = (f"with {na} vs {nb} runs the smallest possible p is {fmt_p(p)} ({2 if na == nb else 1} of {splits:,} "
            "relabellings)")
    return f"{head}: no difference can reach p < {alpha:g}" if p >= alpha else f"{head}, below {alpha:g}"


PER_SEED_HOW = ("per seed (seed: value), their mean and a Student-t 95% CI of the mean, mean ± t_{0.975, n-1} · "
                "s / √n (s: the sample standard deviation over the seeds; none at n = 1)")


def seeds_text(vals: dict) -> str:
    return ", ".join(f"{seed}: {fmt(v)}" for seed, v in vals.items())


def t_text(s: Seeds) -> str:
    return "n = 1, no interval" if len(s.values) < 2 else f"[{fmt(s.lo)}, {fmt(s.hi)}]"


def seed_table(f: Frame, c: Compared, std=False, iqm_column=False, not_reached=None) -> str:
    """One row per game and label: per-seed values, mean (bold: best), Student-t 95% CI, n; optionally the
    population std over seeds and the IQM over seeds (= mean where it trims nothing). A label without values on a
    game has "not reached" when its runs stopped before the metric's window (not_reached), "no data" when it ran
    the game, else "missing"."""
    rows = []
    for g in f.games:
        for lb in f.labels:
            s = c.seeds.get((g, lb))
            if s is None:
                missing = ("not reached" if (g, lb) in (not_reached or {}) else "no data") if g in f.data[lb] \
                    else "missing"
                rows.append([g, lb, missing, "–", "–", *(["–"] if std else []), *(["–"] if iqm_column else []),
                             "0"])
                continue
            n = len(s.values)
            extra = [fmt(s.std) if n > 1 else "–"] if std else []  # one seed: no spread to state
            if iqm_column:  # bold goes to the IQM (c.best: by the IQM)
                extra.append(marked(fmt(s.iqm) if n >= IQM_TRIMS_FROM else f"{fmt(s.mean)} (= mean)", lb in c.best[g]))
            rows.append([g, lb, seeds_text(s.values), marked(fmt(s.mean), lb in c.best[g] and not iqm_column),
                         t_text(s), *extra, str(n)])
    header = ["game", "label", "per seed (seed: value)", "mean", "Student-t 95% CI",
              *(["population std"] if std else []), *(["IQM over seeds"] if iqm_column else []), "n"]
    return md_table(header, rows)


def welch_text(d: Difference) -> str:
    """A difference's Welch 95% interval as the report states it: "[lo, hi]", or why there is none."""
    if d.na < 2 or d.nb < 2:
        return f"n = {min(d.na, d.nb)}, no interval"
    return "no spread, no interval" if not np.isfinite(d.df) else f"[{fmt(d.lo)}, {fmt(d.hi)}]"


def differences(c: Compared) -> list[str]:
    """For each compared pair A vs B and game both have values for (c.differences): A - B (difference of means),
    Welch's 95% CI, the exact permutation p, and a plain statement for every run count too small for p < 0.05."""
    rows, counts = [], {}
    for d in c.differences:
        ci = welch_text(d)
        rows.append([d.game, f"{d.a} − {d.b}", fmt(d.diff), ci, f"{d.df:.2f}" if np.isfinite(d.df) else "–",
                     fmt_p(d.p) + ("" if d.exact else " (sampled)"),
                     f"{d.relabellings:,}" + ("" if d.exact else f" of {d.splits:,}"), f"{d.na} vs {d.nb}"])
        counts.setdefault((d.a, d.b), {}).setdefault((d.na, d.nb, d.smallest_p, d.splits), []).append(d.game)
    if not rows:
        return ["Differences: no game has runs of both labels of a compared pair.", ""]
    md = ["Differences, A − B, per compared pair and game: the difference of the means over seeds; Welch's 95% CI "
          "(Welch–Satterthwaite df); the exact two-sided permutation p over every split of the runs into groups of "
          "their sizes, C(n_A + n_B, n_A) relabellings (statistic: the difference of means; p = the share of "
          "relabellings whose |difference| is at least the observed one).", "",
          md_table(["game", "A − B", "difference of means", "Welch 95% CI", "Welch df", "permutation p",
                    "relabellings", "runs"], rows), ""]
    for (a, b), by_n in counts.items():
        for n, gs in by_n.items():
            md.append(f"- {a} vs {b} ({', '.join(gs)}): {min_p_statement(*n)}.")
    return md + [""]


def pairwise_lines(f: Frame, c: Compared, what: str) -> list[str]:
    """One line per compared pair: in how many of the games both ran a beats b (c.wins; ties are no win)."""
    if not f.pairs:
        return ["- no comparison with runs of both its labels"]
    lines = []
    for a, b in f.pairs:
        wins, n = c.wins[(a, b)]
        lines.append(f"- {a} vs {b}: **{a} {what} in {wins} of {n} games**" if n else
                     f"- {a} vs {b}: no game has a value for both")
    return lines


def best_count_line(c: Compared, labels, what: str) -> str:
    """The paper's "ABS best in 8 of 10 games" line, for the first (reference) label; ties count for all."""
    if not c.complete:
        return f"No game has data for every label: no \"{what}\" count."
    head = f"**{labels[0]} {what} in {c.best_counts[labels[0]]} of {len(c.complete)} games**"
    rest = ", ".join(f"{lb} {c.best_counts[lb]}" for lb in labels[1:])
    return (f"{head} (games every label ran; rows with a missing label are not counted; ties count for each)"
            + (f"; others: {rest}." if rest else "."))
