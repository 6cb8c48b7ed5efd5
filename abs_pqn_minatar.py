"""PQN + Adaptive Batch Scaling (ABS) on MinAtar, one file in the style of CleanRL.

Paper: "Scalable On-Policy Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML 2026). ABS measures
Behavioral Divergence (the fraction of greedy actions that change across an update) and maps it on a log scale
to the rollout length L: a settling policy gets a larger batch. `--no-adapt --num-steps L` gives the fixed-batch
baselines (Small 16, Vanilla 32, Large 64).

MinAtar (Young & Tian 2019, the `minatar` package) is five Atari games on a 10 x 10 grid with one binary channel per
object, small enough that the paper's PQN questions can be asked at full length with many seeds on a CPU. The PQN
settings are purejaxql's `pqn_minatar.yaml` (the PQN authors' MinAtar configuration); docs/minatar.md cites each.

    python abs_pqn_minatar.py --env-id Breakout-MinAtar --seed 1     # --help lists every flag

Reading order: Args; the paper's method (the ABS schedule and divergence, then PQN); the MinAtar environments; this
script's flag checks and evaluation; the training loop at the bottom. The run machinery (flag parsing, resume,
checkpoints, logging, result files) is in abs_utils/, which a copy of this script takes along.
"""
import abs_utils as U
U.catch_signals()  # first: SIGINT/SIGTERM during the slow imports below are one line, not a traceback

import math
import os
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn

SCRIPT = os.path.basename(__file__)[: -len(".py")]


@dataclass
class Args:
    exp_name: str = SCRIPT
    """the name of this experiment (part of the default run name)"""
    seed: int = 1
    """seed of the experiment (python, numpy, torch, the games)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use the GPU when one is visible (falls back to the CPU otherwise)"""
    torch_threads: int = 0
    """CPU threads of torch (0: torch's default, all cores; give each of N runs side by side 1/N of the cores)"""
    track: bool = False
    """log to Weights and Biases (wandb is imported only then)"""
    wandb_project_name: str = "abs"
    """the wandb project name"""
    wandb_entity: Optional[str] = None
    """the wandb entity (team)"""
    output_dir: str = "runs"
    """everything a run writes goes under <output-dir>/<run-name>/"""
    run_name: Optional[str] = None
    """the run directory name (default: {env_id}__{exp_name}__{seed}__{unix time})"""
    resume: Optional[str] = None
    """path of a checkpoint.pt to continue; every flag not given then comes from the checkpoint"""
    checkpoint_every: int = 1_000_000
    """write <run>/checkpoint.pt every this many env steps (0: only at the end and on SIGTERM/SIGINT)"""
    stop_at_step: Optional[int] = None
    """stop training at this env step, a prefix of --total-timesteps (whose schedules it keeps); --resume goes on"""
    extend_schedules: bool = False
    """with --resume and another --total-timesteps: the schedules computed from it go on over the new total"""
    save_model: bool = False
    """write the final Q-network weights to <run>/model.pt"""
    log_every_seconds: float = 5.0
    """at most one progress line per this many seconds"""

    # MinAtar
    env_id: str = "Breakout-MinAtar"
    """the game: Asterix-MinAtar | Breakout-MinAtar | Freeway-MinAtar | Seaquest-MinAtar | SpaceInvaders-MinAtar"""
    sticky_action_prob: float = 0.1
    """probability that a game repeats the previous action (MinAtar's default; gymnax, as purejaxql: 0)"""
    difficulty_ramping: bool = True
    """games speed up as they go on (MinAtar's default; gymnax too)"""
    max_episode_steps: int = 0
    """cut training episodes at this many steps, a time limit that bootstraps (0: none, MinAtar's; gymnax: 1000,
    Freeway 2500)"""

    # PQN (purejaxql's pqn_minatar.yaml)
    total_timesteps: int = 10_000_000
    """total environment steps (summed over the envs)"""
    learning_rate: float = 5e-4
    """RAdam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over --total-timesteps (purejaxql's LR_LINEAR_DECAY)"""
    num_envs: int = 128
    """number of parallel games E"""
    num_minibatches: int = 32
    """minibatches per epoch (fixed; their size grows with L)"""
    gamma: float = 0.99
    """discount factor"""
    q_lambda: float = 0.65
    """lambda of the Q(lambda) targets"""
    max_grad_norm: float = 10.0
    """gradient-norm clip"""
    start_e: float = 1.0
    """initial exploration epsilon"""
    end_e: float = 0.05
    """final exploration epsilon"""
    exploration_fraction: float = 0.1
    """fraction of total-timesteps over which epsilon decays linearly"""
    network: Literal["pqn"] = "pqn"
    """Q-network: pqn (purejaxql's MinAtar CNN: Conv 16 3x3, LayerNorm, Dense 128, LayerNorm)"""
    obs_divisor: float = 1.0
    """divide the 0/1 observations by this before the network (purejaxql: 255; docs/minatar.md)"""

    # ABS
    adapt: bool = True
    """adapt the rollout length with ABS (--no-adapt: fixed --num-steps)"""
    num_steps: int = 32
    """rollout length L when --no-adapt"""
    num_steps_min: int = 16
    """L_min, the shortest rollout ABS uses (and the length during burn-in)"""
    num_steps_max: int = 64
    """L_max, the longest rollout ABS uses (storage is allocated at this length)"""
    adapt_freq: int = 50
    """K: measure the divergence every K iterations"""
    window: int = 10
    """W: the schedule uses the mean of the last W measurements"""
    burn_in: Optional[int] = None
    """measurements before L first moves from L_min (default: W)"""
    ema_beta: float = 0.1
    """beta of the EMA that moves L towards its target"""
    divergence_low: float = 0.05
    """delta_min: a mean divergence at or below this gives L_max"""
    divergence_high: float = 0.95
    """delta_max: a mean divergence at or above this gives L_min"""
    ref_batch_size: int = 2048
    """M: states from the rollout on which the divergence is measured"""
    schedule: Literal["log", "linear"] = "log"
    """interpolation of L between the divergence bounds: log | linear"""
    update_epochs: int = 2
    """base epochs at the reference length (also the floor of the epoch rule)"""
    epochs_ref_steps: int = 32
    """reference length of the epoch rule: epochs = max(base, round(base * L / ref))"""
    track_divergence: bool = False
    """with --no-adapt, still measure and log the divergence every K iterations"""

    # Evaluation
    eval_episodes: int = 100
    """greedy evaluation episodes after training"""
    eval_epsilon: float = 0.0
    """epsilon of the evaluation policy"""
    eval_num_envs: int = 20
    """parallel games for the evaluation (each plays an equal share of the episodes)"""
    eval_max_episode_steps: int = 10_000
    """per-episode step cap of the evaluation (gymnax's conditions: 1000, Freeway 2500)"""
    capture_video: bool = False
    """record the evaluation's first games as MP4 files in <run>/videos/, as a person sees the game (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records: the first the evaluation counts"""

    # Speed (same algorithm; see docs/running.md)
    bf16: bool = False
    """run the Q-network under bfloat16 autocast when acting and learning (targets, loss, divergence stay float32)"""


# The five games: this script's --env-id (gymnax's names, which purejaxql uses) -> the minatar package's game.
GAMES = {"Asterix-MinAtar": "asterix", "Breakout-MinAtar": "breakout", "Freeway-MinAtar": "freeway",
         "Seaquest-MinAtar": "seaquest", "SpaceInvaders-MinAtar": "space_invaders"}
# --resume takes every flag from the checkpoint but these run-control ones, when given.
RUN_CONTROL_FLAGS = (
    "resume", "total_timesteps", "stop_at_step", "extend_schedules", "checkpoint_every", "save_model",
    "log_every_seconds", "cuda", "torch_threads", "track", "wandb_project_name", "wandb_entity", "eval_episodes",
    "eval_epsilon", "eval_num_envs", "eval_max_episode_steps", "capture_video", "video_episodes",
    "bf16",
)
# The script's part of a checkpoint (besides abs_utils.RUN_STATE), checked before a --resume uses it.
CHECKPOINT_STATE = {"q_network": dict, "optimizer": dict, "scheduler": dict, "iteration": int}


# ================================================================ the paper's method: ABS schedule and divergence
def round_half_up(x: float) -> int:
    """Round to the nearest integer, halves up (Python's round() would send 2.5 to 2)."""
    return int(math.floor(x + 0.5))


def divergence_to_length(delta_bar: float, L_min: int, L_max: int, delta_min: float, delta_max: float,
                         schedule: str = "log") -> float:
    """L_target: delta_bar >= delta_max gives L_min, delta_bar <= delta_min gives L_max, log (or linear) between."""
    d = min(max(delta_bar, delta_min), delta_max)
    if schedule == "log":
        alpha = math.log(d / delta_min) / math.log(delta_max / delta_min)
    else:
        alpha = (d - delta_min) / (delta_max - delta_min)
    return L_max - alpha * (L_max - L_min)


def update_epochs_for(L: int, base_epochs: int, ref_steps: int) -> int:
    """Gradient-intensity compensation: updates per transition stay constant as L grows."""
    return max(base_epochs, round_half_up(base_epochs * L / ref_steps))


def measures_in(iteration: int, adapt_freq: int) -> bool:
    """The divergence is measured across iteration `iteration` (counted from 0): the K-th, 2K-th, ... iteration, as in
    the authors' code (which counts from 1). Not the first: its update is RAdam's first, un-adapted steps, across
    which the divergence reads about 0 (docs/pqn.md), a value that would lower delta_bar through the whole burn-in."""
    return (iteration + 1) % adapt_freq == 0


class ABSScheduler:
    """Keeps the last W divergences and L as a float EMA state (rounded only when used)."""

    def __init__(self, L_min, L_max, window, beta, delta_min, delta_max, schedule="log", burn_in=None):
        self.L_min, self.L_max, self.window, self.beta = L_min, L_max, window, beta
        self.delta_min, self.delta_max, self.schedule = delta_min, delta_max, schedule
        self.history, self.burn_in = deque(maxlen=window), window if burn_in is None else burn_in
        self.L, self.num_measurements = float(L_min), 0

    @property
    def delta_bar(self) -> float:
        return float(np.mean(self.history)) if self.history else float("nan")

    @property
    def num_steps(self) -> int:
        return round_half_up(self.L)

    def record(self, delta: float) -> None:
        """Keep a measurement for the window mean without moving L (the fixed-batch baselines' logs)."""
        self.history.append(delta)
        self.num_measurements += 1

    def update(self, delta: float) -> int:
        self.record(delta)
        if self.num_measurements < self.burn_in:  # burn-in: too few measurements to trust, stay at L_min
            return self.num_steps
        target = divergence_to_length(self.delta_bar, self.L_min, self.L_max, self.delta_min, self.delta_max,
                                      self.schedule)
        self.L = min(max((1.0 - self.beta) * self.L + self.beta * target, self.L_min), self.L_max)
        return self.num_steps

    def state_dict(self):
        return {"L": self.L, "history": list(self.history), "num_measurements": self.num_measurements}

    def load_state_dict(self, state):
        self.L, self.num_measurements = float(state["L"]), int(state["num_measurements"])
        self.history = deque(state["history"], maxlen=self.window)


@torch.no_grad()
def behavioral_divergence(q_new: nn.Module, q_old: nn.Module, states: torch.Tensor) -> float:
    """delta: the fraction of states whose greedy action differs between the two networks."""
    return (q_new(states).argmax(dim=1) != q_old(states).argmax(dim=1)).float().mean().item()


# ================================================================ PQN: Q(lambda) targets, network, acting, update
def q_lambda_returns(rewards, next_values, terminals, episode_ends, gamma, q_lambda):
    """Q(lambda) targets over a [L, E] rollout, computed backwards.

    next_values[t] = max_a Q(s_{t+1}, a); terminals[t]: transition t ended in a terminal state
    (no bootstrap); episode_ends[t]: terminal or time-limit end (the lambda trace is cut there, and a
    time-limit end still bootstraps from its last observation). The rollout's last step cuts the trace.
    """
    returns = torch.empty_like(rewards)
    g = next_values[-1]
    for t in reversed(range(rewards.shape[0])):
        trace = 0.0 if t == rewards.shape[0] - 1 else q_lambda * (1.0 - episode_ends[t])
        g = rewards[t] + gamma * (1.0 - terminals[t]) * (trace * g + (1.0 - trace) * next_values[t])
        returns[t] = g
    return returns


def learning_rate_at(learning_rate: float, global_step: int, total_timesteps: int, anneal: bool) -> float:
    """The rate of an iteration that starts at global_step: constant, or with anneal linearly to 0 by the
    fraction of environment steps done (iterations vary in length), as in the authors' GNS code."""
    return learning_rate * max(0.0, 1.0 - global_step / total_timesteps) if anneal else learning_rate


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    return max(end_e, start_e + (end_e - start_e) * t / max(duration, 1.0))


def variance_scaling_(weight: torch.Tensor, scale: float) -> None:
    """Flax's variance_scaling(scale, "fan_in", "truncated_normal"), the initialiser of purejaxql's network:
    he_normal is scale 2, lecun_normal (Flax's Dense default) scale 1."""
    fan_in = weight[0].numel()  # in_features, or in_channels x kernel height x kernel width
    std = math.sqrt(scale / fan_in) / 0.87962566103423978  # the std of a standard normal truncated at +-2
    nn.init.trunc_normal_(weight, std=std, a=-2.0 * std, b=2.0 * std)


class QNetwork(nn.Module):
    """purejaxql's MinAtar Q-network: Conv(16, 3x3, valid) -> LayerNorm -> ReLU -> Dense(128) -> LayerNorm -> ReLU ->
    Dense(actions). Flax's LayerNorm normalises the last axis, so after the convolution it normalises each grid cell's
    16 channels (not the whole feature map, as PQN's Atari network does); its epsilon is Flax's 1e-6."""

    def __init__(self, in_channels: int, num_actions: int, network: str = "pqn", obs_divisor: float = 1.0):
        super().__init__()
        self.obs_divisor = obs_divisor
        self.conv = nn.Conv2d(in_channels, 16, 3)  # 10 x 10 -> 8 x 8
        self.conv_norm = nn.LayerNorm(16, eps=1e-6)
        self.dense = nn.Sequential(nn.Linear(16 * 8 * 8, 128), nn.LayerNorm(128, eps=1e-6), nn.ReLU())
        self.head = nn.Linear(128, num_actions)
        for layer, scale in ((self.conv, 2.0), (self.dense[0], 2.0), (self.head, 1.0)):
            variance_scaling_(layer.weight, scale)
            nn.init.zeros_(layer.bias)

    def forward(self, x):  # x: uint8 [N, C, 10, 10], 0 or 1
        h = self.conv(x.float() / self.obs_divisor).permute(0, 2, 3, 1)  # [N, 8, 8, 16]: channels last, as Flax
        h = torch.relu(self.conv_norm(h)).flatten(1)
        return self.head(self.dense(h))


def autocast(device: torch.device, bf16: bool):
    """bfloat16 autocast on `device` with --bf16, a no-op context without (callers cast outputs back to float32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


def select_actions(q_values: torch.Tensor, epsilon: float):
    """Epsilon-greedy on the device; returns actions and max_a Q."""
    values, greedy = q_values.max(dim=1)
    explore = torch.rand(q_values.shape[0], device=q_values.device) < epsilon
    random_actions = torch.randint(0, q_values.shape[1], greedy.shape, device=q_values.device)
    return torch.where(explore, random_actions, greedy), values


@dataclass
class Rollout:
    """Rollout storage, allocated once at L_max (an iteration uses the first L rows); uint8 observations.
    valid[t] = 0 marks envpool's reset transition after an episode end, whose action the env ignored."""
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    values: torch.Tensor
    terminals: torch.Tensor
    ends: torch.Tensor
    valid: torch.Tensor

    @classmethod
    def allocate(cls, L_max, num_envs, obs_shape, device):
        def zeros(dtype=torch.float32, shape=()):
            return torch.zeros((L_max, num_envs) + tuple(shape), dtype=dtype, device=device)

        return cls(obs=zeros(torch.uint8, obs_shape), actions=zeros(torch.long), rewards=zeros(), values=zeros(),
                   terminals=zeros(), ends=zeros(), valid=zeros())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in vars(self).values())


def pqn_update(q_network, optimizer, batch, epochs, args, forward=None):
    """Epochs of --num-minibatches minibatch MSE between Q(s, a) and the Q(lambda) return over batch = (obs,
    actions, returns, valid); returns mean loss and mean Q. `forward` is q_network or its torch.compile wrapper."""
    obs, actions, returns, valid = batch
    forward = q_network if forward is None else forward
    size = obs.shape[0]
    mb_size = size // args.num_minibatches
    losses, qs = [], []
    for _ in range(epochs):
        perm = torch.randperm(size, device=obs.device)
        for start in range(0, size, mb_size):
            idx = perm[start : start + mb_size]
            with autocast(obs.device, args.bf16):
                q_all = forward(obs[idx])
            q = q_all.float().gather(1, actions[idx].unsqueeze(1)).squeeze(1)
            w = valid[idx]  # drops envpool's reset transitions, whose action the env ignored
            loss = (w * (q - returns[idx]).pow(2)).sum() / w.sum().clamp(min=1.0)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
            if not torch.isfinite(grad_norm):  # a non-finite loss or gradient: stop before the step
                raise U.NonFiniteLoss(f"non-finite TD loss or gradient (loss {loss.item()}, "
                                      f"grad norm {grad_norm.item()})")
            optimizer.step()
            losses.append(loss.detach())
            qs.append(q.detach().mean())
    return torch.stack(losses).mean().item(), torch.stack(qs).mean().item()


# ================================================================ the MinAtar environments
class MinAtarEnvs:
    """E MinAtar games stepped together, with envpool's interface (reset, step, config, action_space) so that the
    PQN loop and the evaluation read like the Atari script's. The games are the package's pure-Python
    `minatar.Environment`, so this loop over the games is the environment's own cost; everything else is vectorised.

    Actions index the game's minimal action set. An episode that ends (terminal, or --max-episode-steps reached:
    truncated) is reset by the env's next step, whose action is ignored and whose reward is 0, as envpool's
    autoreset does: the loop marks that transition invalid. Observations are uint8 [E, C, 10, 10]."""

    def __init__(self, env_id, num_envs, seed, sticky_action_prob=0.1, difficulty_ramping=True, max_episode_steps=0):
        import minatar  # here, not at the top: the flag checks name a missing package in one line first

        self.games = [minatar.Environment(GAMES[env_id], sticky_action_prob=sticky_action_prob,
                                          difficulty_ramping=difficulty_ramping) for _ in range(num_envs)]
        for i, game in enumerate(self.games):
            game.seed(seed + i)  # one stream per game: the sticky actions and the game's own randomness
        self.action_set = np.asarray(self.games[0].minimal_action_set())
        self.config = {"num_envs": num_envs}
        self.action_space = SimpleNamespace(n=len(self.action_set))
        self.max_episode_steps = max_episode_steps
        h, w, c = self.games[0].state_shape()
        self.observation_space = SimpleNamespace(shape=(c, h, w))
        self._states = np.zeros((num_envs, h, w, c), dtype=np.uint8)  # the games' [H, W, C] layout
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        self._zeros = np.zeros(num_envs, dtype=np.int32)

    def _observation(self):
        return np.ascontiguousarray(self._states.transpose(0, 3, 1, 2))

    def reset(self):
        for i, game in enumerate(self.games):
            game.reset()
            self._states[i] = game.state()
        self._elapsed[:] = 0
        self._needs_reset[:] = False
        return self._observation(), {"elapsed_step": self._elapsed.copy(), "lives": self._zeros}

    def step(self, actions):
        reward = np.zeros(len(self.games), dtype=np.float32)
        term = np.zeros(len(self.games), dtype=bool)
        states, needs_reset = self._states, self._needs_reset
        for i, (game, a) in enumerate(zip(self.games, self.action_set[actions].tolist())):
            if needs_reset[i]:
                game.reset()
            else:
                reward[i], term[i] = game.act(a)
            states[i] = game.state()
        self._elapsed = np.where(needs_reset, 0, self._elapsed + 1)
        trunc = ~term & (self._elapsed >= self.max_episode_steps) if self.max_episode_steps else np.zeros_like(term)
        trunc &= ~needs_reset
        self._needs_reset = term | trunc
        return self._observation(), reward, term, trunc, {"elapsed_step": self._elapsed.copy(), "lives": self._zeros}

    def render(self, env_ids, cell: int = 16):
        """The games' screens, uint8 [len(env_ids), 10 * cell, 10 * cell, 3], in the package's own colours
        (minatar.Environment.display_state: black, then seaborn's cubehelix palette, one colour a channel, the
        highest set channel drawn), each grid cell a block of cell x cell pixels, without opening a window."""
        channels = self._states.shape[3]
        if getattr(self, "_palette", None) is None:
            import seaborn  # minatar's own dependency, for its palette

            colours = [(0.0, 0.0, 0.0)] + list(seaborn.color_palette("cubehelix", channels))
            self._palette = np.round(np.asarray(colours) * 255).astype(np.uint8)
        cells = (self._states[env_ids] * np.arange(1, channels + 1, dtype=np.uint8)).max(axis=3)
        return self._palette[cells].repeat(cell, axis=1).repeat(cell, axis=2)

    def close(self):
        pass


# ================================================================ this script's flags and evaluation
def flag_problems(a: Args):
    """(ok, message) rows for this script's flags, checked in order after abs_utils.common_problems (the first
    failing row is the error); one-flag rows come first, so that the rows relating several flags may divide by them."""
    yield a.env_id in GAMES, f"--env-id must be one of {', '.join(GAMES)}, got {a.env_id!r}"
    yield from U.in_domain(a, ">= 1", "total_timesteps", "num_minibatches", "num_steps", "num_steps_min",
                           "num_steps_max", "adapt_freq", "window", "ref_batch_size", "update_epochs",
                           "epochs_ref_steps")
    yield from U.in_domain(a, "in [1, 2^31)", "num_envs", "eval_num_envs", "eval_max_episode_steps")
    yield a.burn_in is None or a.burn_in >= 1, f"--burn-in must be >= 1, got {a.burn_in!r}"
    yield from U.in_domain(a, ">= 0", "checkpoint_every", "log_every_seconds", "eval_episodes", "max_episode_steps")
    yield from U.in_domain(a, "> 0", "learning_rate", "max_grad_norm", "obs_divisor")
    yield from U.in_domain(a, "in (0, 1]", "gamma", "ema_beta")
    yield from U.in_domain(a, "in [0, 1]", "q_lambda", "start_e", "end_e", "exploration_fraction", "eval_epsilon",
                           "sticky_action_prob")
    yield (a.num_steps_min <= a.num_steps_max,
           f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max ({a.num_steps_max})")
    yield (0.0 < a.divergence_low < a.divergence_high <= 1.0, "--divergence-low and --divergence-high must satisfy "
           f"0 < low < high <= 1, got {a.divergence_low} and {a.divergence_high}")
    # Every L the run may use must split into equal minibatches.
    yield (not a.adapt or a.num_envs % a.num_minibatches == 0, f"--num-envs ({a.num_envs}) must be divisible by "
           f"--num-minibatches ({a.num_minibatches}) so that every L in [L_min, L_max] splits evenly")
    yield (a.adapt or (a.num_envs * a.num_steps) % a.num_minibatches == 0, "the batch --num-envs x --num-steps "
           f"({a.num_envs * a.num_steps}) must be divisible by --num-minibatches ({a.num_minibatches})")
    L, flag = (a.num_steps_max, "--num-steps-max") if a.adapt else (a.num_steps, "--num-steps")  # the longest update
    yield U.epochs_problem(update_epochs_for(L, a.update_epochs, a.epochs_ref_steps),
                           f"--update-epochs {a.update_epochs}, --epochs-ref-steps {a.epochs_ref_steps} and {flag} {L}")
    yield U.rollout_memory_problem(a, lambda L: Rollout.allocate(L, a.num_envs, (10, 10, 10), "meta").nbytes)
    yield minatar_problem()


def minatar_problem() -> tuple[bool, str]:
    """The games come from the `minatar` package (requirements.txt); its absence is one line, not a traceback."""
    try:
        import minatar  # noqa: F401
    except ImportError as e:
        return False, f"--env-id needs the minatar package (pip install -r requirements.txt): {e}"
    return True, ""


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """The flags (with --resume, the checkpoint's for every flag not given); exit 2 with one line on bad input."""
    return U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, CHECKPOINT_STATE, argv)


@torch.no_grad()
def evaluate(q_network, args, seed, device, run_dir=None):
    """--eval-episodes games, epsilon-greedy (--eval-epsilon), each of the evaluation's games playing an equal share
    (abs_utils.play_atari_games's quota), under the training's game settings and --eval-max-episode-steps. With
    --capture-video, the first games go to <run_dir>/videos/ (MinAtarEnvs.render, 10 frames a second)."""
    def act(obs):
        with autocast(device, args.bf16):
            q_values = q_network(torch.from_numpy(obs).to(device)).float()
        return select_actions(q_values, args.eval_epsilon)[0].cpu().numpy()

    envs = MinAtarEnvs(args.env_id, min(args.eval_num_envs, args.eval_episodes), seed, args.sticky_action_prob,
                       args.difficulty_ramping, args.eval_max_episode_steps)
    return U.play_atari_games(envs, act, args.eval_episodes, fire=None, videos=U.videos_of(args, run_dir, fps=10))


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "inference", "update", "adapt"))
    device = run.device

    envs = MinAtarEnvs(args.env_id, args.num_envs, run.env_seed, args.sticky_action_prob, args.difficulty_ramping,
                       args.max_episode_steps)
    obs_shape = envs.observation_space.shape
    q_network = QNetwork(obs_shape[0], envs.action_space.n, args.network, args.obs_divisor).to(device)
    # foreach: RAdam's multi-tensor step, the same arithmetic in fewer kernels (a third of an update of this small
    # network on a CPU core is otherwise the optimizer's per-parameter loop)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate, foreach=True)
    snapshot = QNetwork(obs_shape[0], envs.action_space.n, args.network, args.obs_divisor).to(device)  # theta
    E = args.num_envs
    # Fixed-batch mode (--no-adapt): L = --num-steps throughout; the scheduler only records divergences.
    L_min, L_max = (args.num_steps_min, args.num_steps_max) if args.adapt else (args.num_steps, args.num_steps)
    scheduler = ABSScheduler(L_min, L_max, args.window, args.ema_beta, args.divergence_low,
                             args.divergence_high, args.schedule, args.burn_in)
    rollout = Rollout.allocate(L_max, E, obs_shape, device)  # rollout.obs[t]: step t

    global_step, iteration = 0, 0
    if checkpoint is not None:
        U.load_state(args.resume, checkpoint, "q_network", q_network.load_state_dict)
        U.load_state(args.resume, checkpoint, "optimizer", optimizer.load_state_dict)
        U.load_state(args.resume, checkpoint, "scheduler", scheduler.load_state_dict)
        global_step, iteration = checkpoint["global_step"], checkpoint["iteration"]
        print(f"resumed {run.checkpoint_path} at global_step {global_step} (environments restart from a reset "
              f"seeded with {run.env_seed})")
    run.begin(global_step)
    run.log(global_step, {"perf/storage_bytes": rollout.nbytes})
    print(f"run {run.dir} on {device}; rollout storage {rollout.nbytes / 2**20:.1f} MiB at L_max={L_max}")

    def state():  # what a checkpoint holds besides what the Run adds (RNGs, flags, timings)
        return {"q_network": q_network.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "global_step": global_step, "iteration": iteration}

    next_obs = torch.from_numpy(envs.reset()[0]).to(device)
    prev_end = torch.zeros(E, device=device)  # the previous transition ended an episode
    ep_return, recent_returns = np.zeros(E), deque(maxlen=20)
    measuring = args.adapt or args.track_divergence
    while global_step < run.stop_step:  # --total-timesteps, or --stop-at-step
        L = scheduler.num_steps
        epochs = update_epochs_for(L, args.update_epochs, args.epochs_ref_steps)
        learning_rate = learning_rate_at(args.learning_rate, global_step, args.total_timesteps, args.anneal_lr)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        measure = measuring and measures_in(iteration, args.adapt_freq)
        if measure:
            snapshot.load_state_dict(q_network.state_dict())
        for step in range(L):
            with run.timed("inference"):
                epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                          global_step)
                rollout.obs[step] = next_obs
                rollout.valid[step] = 1.0 - prev_end
                with torch.no_grad(), autocast(device, args.bf16):
                    q_values = q_network(next_obs).float()
                action, rollout.values[step] = select_actions(q_values, epsilon)
                rollout.actions[step] = action
                action_np = action.cpu().numpy()
            with run.timed("env"):
                obs, reward, term, trunc, info = envs.step(action_np)
            next_obs = torch.from_numpy(obs).to(device)
            rollout.rewards[step] = torch.from_numpy(reward).to(device)
            rollout.terminals[step] = torch.from_numpy(term).to(device)
            rollout.ends[step] = torch.from_numpy(term | trunc).to(device)
            prev_end = rollout.ends[step].clone()
            global_step += E
            # Episode statistics (MinAtar has no lives: an episode is a game), vectorised over the envs.
            ep_return += reward
            game_over = term | trunc
            if game_over.any():
                run.log_games(ep_return[game_over], info["elapsed_step"][game_over], global_step)
                recent_returns.extend(ep_return[game_over].tolist())
                ep_return[game_over] = 0.0

        with run.timed("update"):
            with torch.no_grad():
                with autocast(device, args.bf16):
                    last_value = q_network(next_obs).float().max(dim=1).values
                next_values = torch.cat([rollout.values[1:L], last_value.unsqueeze(0)])
                returns = q_lambda_returns(rollout.rewards[:L], next_values, rollout.terminals[:L], rollout.ends[:L],
                                           args.gamma, args.q_lambda)
            b_obs = rollout.obs[:L].reshape((L * E,) + rollout.obs.shape[2:])
            try:
                batch = (b_obs, rollout.actions[:L].reshape(-1), returns.reshape(-1), rollout.valid[:L].reshape(-1))
                td_loss, mean_q = pqn_update(q_network, optimizer, batch, epochs, args)
            except U.NonFiniteLoss as e:  # checkpoint_nonfinite.pt: the state before the failing step; exit 3
                run.fail(global_step, e, state)

        if measure:
            with run.timed("adapt"):
                ref = torch.randperm(L * E, device=device)[: args.ref_batch_size]
                delta = behavioral_divergence(q_network, snapshot, b_obs[ref])
                if args.adapt:
                    scheduler.update(delta)
                else:  # fixed batch: the divergence is only logged (--track-divergence)
                    scheduler.record(delta)
            new_L = scheduler.num_steps
            run.log(global_step, {
                "adapt/divergence": delta, "adapt/divergence_mean": scheduler.delta_bar, "adapt/num_steps": new_L,
                "adapt/batch_size": new_L * E,
                "adapt/update_epochs": update_epochs_for(new_L, args.update_epochs, args.epochs_ref_steps)})
        iteration += 1

        sps = run.sps(global_step)
        run.log(global_step, {"charts/SPS": sps, "charts/epsilon": epsilon, "charts/learning_rate": learning_rate,
                              "losses/td_loss": td_loss, "losses/q_values": mean_q}, perf=True)
        window = f" | delta_bar {scheduler.delta_bar:.3f}" if scheduler.history else ""  # once a measurement exists
        run.progress(global_step, sps, f"L {scheduler.num_steps}{window} | eps {epsilon:.3f}", recent_returns)
        run.checkpoint(global_step, L * E, state)  # and on SIGTERM/SIGINT: checkpoint, exit 128 + n
    envs.close()
    run.end_training()

    if args.save_model:
        run.save_model({"q_network": q_network.state_dict()})
    returns, lengths, capped, action_counts = [], [], 0, None
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes (epsilon {args.eval_epsilon}, "
              f"cap {args.eval_max_episode_steps} steps)")
        returns, lengths, capped, action_counts = evaluate(q_network, args, args.seed + 10_000, device, run.dir)
    run.finish(global_step, returns, lengths, capped, action_counts)
