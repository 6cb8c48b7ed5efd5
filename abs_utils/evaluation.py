"""Evaluation records and the Atari evaluation loop that the four Atari scripts share.

Each Atari script's `evaluate` builds its envs and its action choice and hands them to `play_atari_games`; every
script's evaluation ends in `summarize_eval`, the "eval" entry of eval_results.json.
"""
from typing import Callable, Optional

import numpy as np

from .video import Recorder, Videos


# An evaluation policy that chose one action on at least this share of its steps is reported as near-constant: its
# score says which action that is more than how it plays (PQN's greedy policy early in training can be one action).
NEAR_CONSTANT_SHARE = 0.9


def summarize_eval(returns, lengths, capped, action_counts=None) -> dict:
    r = np.asarray(returns, dtype=np.float64)
    stats = ({"mean": r.mean(), "std": r.std(), "median": np.median(r), "min": r.min(), "max": r.max()} if len(r)
             else dict.fromkeys(("mean", "std", "median", "min", "max")))
    counts = {} if action_counts is None else {"action_counts": [int(c) for c in action_counts]}
    return {"episodes": len(returns), "returns": [float(x) for x in returns], "lengths": [int(x) for x in lengths],
            **{k: None if v is None else float(v) for k, v in stats.items()}, "capped": int(capped), **counts}


def top_action(action_counts) -> tuple[int, float]:
    """(the most frequent action, its share of the steps) of an evaluation's action_counts (ties: the lowest index)."""
    counts = np.asarray(action_counts, dtype=np.int64)
    return int(counts.argmax()), float(counts.max() / counts.sum())


def action_names(env_id: str) -> list[str]:
    """The names of an Atari game's actions in envpool's order (the game's minimal action set): the index of an
    action in eval.action_counts names it, e.g. action_names("Breakout-v5") == ["NOOP", "FIRE", "RIGHT", "LEFT"]."""
    from ale_py import ALEInterface, LoggerMode, roms  # the Atari scripts' requirement, imported only here
    game = env_id.split("-")[0].lower()  # "MsPacman-v5" -> the ROM id "ms_pacman"
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(next(r for r in roms.get_all_rom_ids() if r.replace("_", "") == game)))
    return [a.name for a in ale.getMinimalActionSet()]


def fire_action(env_id: str) -> Optional[int]:  # FIRE's index in the Atari game's (envpool's) actions, or None
    names = action_names(env_id)
    return names.index("FIRE") if "FIRE" in names else None


def play_atari_games(envs, act: Callable, episodes: int, fire: Optional[int], protocol: str = "quota",
                     videos: Optional[Videos] = None):
    """(returns, lengths, capped, action_counts) of `episodes` whole games on envpool Atari envs, act(obs) -> actions.
    action_counts[a]: the steps, over every env and every step played, on which the policy chose action a (an index of
    envs.action_space, the game's minimal action set; before the FIRE below), to show a policy that barely depends on
    what it sees.
    protocol "quota": each env plays a fixed quota, so that short games are not favoured; "first-finished": the first
    `episodes` games to end on any env, in the order they end (env index within a step), as the authors' PQN and GNS
    code counts them: an env with short games ends more of them, so short games are over-represented. With `fire`
    (FIRE's index), an env presses it on the step after it lost a life, as envpool's reset does in training.
    videos (--capture-video): the first counted games of the first envs as MP4 files, from envs.render(env_ids),
    which neither steps nor reseeds them (abs_utils/video.py)."""
    num_envs = envs.config["num_envs"]
    if protocol == "quota":
        quota = np.full(num_envs, episodes // num_envs)
        quota[: episodes % num_envs] += 1
    elif protocol == "first-finished":  # no env has a share: the first `episodes` games to end count
        quota = np.full(num_envs, episodes)
    else:
        raise ValueError(f"unknown evaluation protocol {protocol!r}")
    finished, ep_return = np.zeros(num_envs, dtype=np.int64), np.zeros(num_envs)
    returns, lengths, capped = [], [], 0
    action_counts = np.zeros(envs.action_space.n, dtype=np.int64)
    recorder = None if videos is None else Recorder(videos, num_envs, lambda ids: envs.render(env_ids=ids))
    obs, info = envs.reset()
    lives = info["lives"]
    if recorder is not None:
        recorder.capture()
    while len(returns) < episodes:
        actions = act(obs)
        action_counts += np.bincount(actions, minlength=len(action_counts))
        if fire is not None:  # a life was lost in the last step (or the game ended: the reset ignores the action)
            actions = np.where(info["lives"] < lives, fire, actions)
        lives = info["lives"]
        obs, reward, term, trunc, info = envs.step(actions)
        ep_return += reward
        ended = term | trunc
        counted = ended & (finished < quota)
        counted &= np.cumsum(counted) <= episodes - len(returns)  # first-finished: ties by env index, up to the end
        if recorder is not None:
            record(recorder, ended, counted, len(returns), ep_return)
        returns += ep_return[counted].tolist()
        lengths += info["elapsed_step"][counted].tolist()
        capped += int((counted & trunc & ~term).sum())
        finished += ended
        ep_return[ended] = 0.0
    if recorder is not None:
        recorder.close()
    envs.close()
    return returns, lengths, capped, action_counts.tolist()


def record(recorder: Recorder, ended, counted, done: int, ep_return) -> None:
    """After a step: the recorded envs' frames, then their games that ended (each counted one with its index among
    the evaluation's returns: `done` were counted before this step)."""
    recorder.capture()
    index = done + np.cumsum(counted) - 1
    for env in np.flatnonzero(ended[: len(recorder.envs)]):
        recorder.ended(int(env), int(index[env]) if counted[env] else None, float(ep_return[env]))
