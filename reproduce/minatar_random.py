"""A uniformly random policy's mean return on each MinAtar game: the 0 of the normalised score that the MinAtar
study's aggregate uses (docs/results-minatar-batches.md), written to reproduce/minatar_random.csv.

    python -m reproduce.minatar_random [--episodes 1000] [--seed 0]

Each game is played under abs_pqn_minatar.py's defaults (sticky actions 0.1, difficulty ramping, no step cap): the
random action is drawn from the game's minimal action set (the script's actions) at every step.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().with_name("minatar_random.csv")
GAMES = {"Asterix-MinAtar": "asterix", "Breakout-MinAtar": "breakout", "Freeway-MinAtar": "freeway",
         "Seaquest-MinAtar": "seaquest", "SpaceInvaders-MinAtar": "space_invaders"}


def random_returns(game: str, episodes: int, seed: int) -> np.ndarray:
    """The returns of `episodes` games of `game` (a minatar package name) under uniformly random actions."""
    import minatar

    env = minatar.Environment(game, sticky_action_prob=0.1, difficulty_ramping=True)
    env.seed(seed)
    actions, rng = env.minimal_action_set(), np.random.default_rng(seed)
    returns = np.zeros(episodes)
    for i in range(episodes):
        env.reset()
        terminal = False
        while not terminal:
            reward, terminal = env.act(actions[rng.integers(len(actions))])
            returns[i] += reward
    return returns


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=1000, help="games per MinAtar game (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the games and the actions (default 0)")
    p.add_argument("--out", type=Path, default=OUT, help=f"the CSV to write (default {OUT.name} beside this file)")
    a = p.parse_args(argv)
    if a.episodes < 1:
        p.error(f"--episodes must be >= 1, got {a.episodes}")
    rows = []
    for env_id, game in GAMES.items():
        r = random_returns(game, a.episodes, a.seed)
        rows.append({"game": env_id, "random": f"{r.mean():.4f}", "sem": f"{r.std(ddof=1) / np.sqrt(len(r)):.4f}",
                     "episodes": a.episodes, "seed": a.seed})
        print(f"{env_id}: {r.mean():.4f} +- {r.std(ddof=1) / np.sqrt(len(r)):.4f} (s.e.m., {a.episodes} games)")
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
