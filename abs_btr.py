"""Beyond The Rainbow (BTR) + Adaptive Batch Scaling (ABS) on envpool Atari, one file in the style of CleanRL.

Papers: "Scalable On-Policy Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML 2026), section 5.7;
"Beyond The Rainbow: High Performance Deep Reinforcement Learning on a Desktop PC" (Clark et al., ICML 2025).
BTR = IMPALA CNN (x2, spectral norm, 6x6 max-pool) + IQN + dueling noisy streams + LayerNorm + Munchausen targets
+ 3-step returns + prioritised replay. ABS for replay methods maps the Behavioral Divergence (the fraction of greedy
actions that change across a few gradient steps) to the *sampled batch size* in [B_min, B_max]: a settling policy
gets a larger batch. `--no-adapt --batch-size B` gives the fixed-batch baselines; every BTR component has a flag
for ablations.

    python abs_btr.py --env-id Breakout-v5 --seed 1     # --help lists every flag

Reading order: Args; the paper's method (the ABS schedule and divergence, then BTR: replay, network, targets,
update, exploration); this script's flag checks and evaluation; the training loop at the bottom. The run machinery
(flag parsing, resume, checkpoints, logging, result files) is in abs_utils/, which a copy of this script takes
along.
"""
import abs_utils as U
U.catch_signals()  # first: SIGINT/SIGTERM during the slow imports below are one line, not a traceback

import copy
import math
import os
from collections import deque
from dataclasses import dataclass
from typing import Literal, Optional

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SCRIPT = os.path.basename(__file__)[: -len(".py")]


@dataclass
class Args:
    exp_name: str = SCRIPT
    """the name of this experiment (part of the default run name)"""
    seed: int = 1
    """seed of the experiment (python, numpy, torch, envpool)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use the GPU when one is visible (falls back to the CPU otherwise)"""
    torch_threads: int = 0
    """CPU threads of torch (0: torch's default, all cores; give each of N runs side by side 1/N of the cores)"""
    env_threads: int = 0
    """envpool's worker threads (0: envpool's default, one per env up to the cores)"""
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
    checkpoint_buffer: bool = False
    """also put the replay buffer in checkpoints (~7 KB a transition; kept on --resume); without it a resume refills"""
    save_model: bool = False
    """write the final Q-network weights to <run>/model.pt"""
    log_every_seconds: float = 5.0
    """at most one progress line per this many seconds"""
    scalar_every: int = 100
    """write the SPS/epsilon/losses/perf scalars every this many vectorised env steps (games: as they end)"""

    # BTR
    env_id: str = "Breakout-v5"
    """an envpool Atari id, e.g. Breakout-v5"""
    total_timesteps: int = 20_000_000
    """total environment steps (summed over the envs)"""
    learning_rate: float = 1e-4
    """Adam learning rate (constant)"""
    adam_eps: float = 0.005 / 256
    """Adam epsilon (BTR: 0.005 / 256)"""
    num_envs: int = 64
    """number of parallel envpool environments (one gradient step per vectorised step)"""
    buffer_size: int = 1_048_576
    """replay capacity in transitions (a multiple of --num-envs; each env stream gets buffer-size/num-envs rows)"""
    learning_starts: int = 200_000
    """transitions in the replay buffer before gradient steps start (again after a resume without the buffer)"""
    gamma: float = 0.997
    """discount factor"""
    n_step: int = 3
    """n of the n-step returns (they stop at episode ends)"""
    max_grad_norm: float = 10.0
    """gradient-norm clip"""
    target_network_frequency: int = 500
    """gradient steps between hard target-network updates"""
    start_e: float = 1.0
    """initial exploration epsilon (on top of the noisy nets)"""
    end_e: float = 0.01
    """final exploration epsilon"""
    epsilon_schedule: Literal["geometric", "linear"] = "geometric"
    """epsilon decay: geometric (BTR's, end + (start - end)(1 - 1/exploration-steps)^t at env step t) | linear"""
    exploration_steps: int = 2_000_000
    """env steps of the epsilon decay: the geometric decay's time constant, or the linear decay's length"""
    epsilon_off_fraction: float = 0.5
    """noisy nets: epsilon is 0 from this fraction of --total-timesteps on, not before learning starts (BTR: 0.5)"""
    impala: bool = True
    """IMPALA CNN encoder (--no-impala: the Nature DQN CNN)"""
    model_size: float = 2.0
    """width scale of the IMPALA CNN (channels 16, 32, 32 times this)"""
    spectral_norm: bool = True
    """spectral normalisation on the IMPALA residual convs"""
    maxpool_size: int = 6
    """adaptive max-pool of the IMPALA output to this size (0: off)"""
    hidden_size: int = 512
    """width of the hidden layer of each dueling stream"""
    layer_norm: bool = True
    """LayerNorm after the hidden layer of each stream"""
    noisy: bool = True
    """factorised noisy linear layers in the streams (--no-noisy: plain linear)"""
    noisy_sigma0: float = 0.5
    """initial noise scale sigma_0 of the noisy layers"""
    dueling: bool = True
    """dueling value and advantage streams"""
    iqn: bool = True
    """implicit quantile head and quantile Huber loss (--no-iqn: one Q-value per action, Huber loss)"""
    num_tau: int = 8
    """quantile fractions sampled per state (online and target networks)"""
    num_cosines: int = 64
    """cosine features of the quantile embedding"""
    kappa: float = 1.0
    """Huber threshold of the quantile Huber loss"""
    munchausen: bool = True
    """Munchausen targets (--no-munchausen: n-step IQN targets with the target network's greedy action)"""
    munchausen_alpha: float = 0.9
    """weight of the Munchausen log-policy bonus"""
    munchausen_tau: float = 0.03
    """entropy temperature of the Munchausen soft policy"""
    munchausen_clip: float = -1.0
    """lower clip l0 of the scaled log-policy bonus"""
    per: bool = True
    """prioritised replay (--no-per: uniform sampling, no importance weights)"""
    per_alpha: float = 0.2
    """priority exponent"""
    per_beta: float = 0.45
    """initial importance-sampling exponent, annealed linearly to 1 from learning start to the end of training"""

    # ABS
    adapt: bool = True
    """adapt the sampled batch size with ABS (--no-adapt: fixed --batch-size)"""
    batch_size: int = 256
    """batch size when --no-adapt"""
    batch_size_min: int = 128
    """B_min, the smallest batch ABS uses (and the batch during burn-in)"""
    batch_size_max: int = 512
    """B_max, the largest batch ABS uses"""
    batch_size_multiple: int = 32
    """ABS rounds its batch to a multiple of this (B_min and B_max must be multiples)"""
    adapt_freq: int = 500
    """K: start a divergence measurement every K gradient steps"""
    divergence_offset: Optional[int] = None
    """gradient step of the first measurement, then every K (default: half the target period, between two copies)"""
    divergence_span: int = 8
    """gradient steps between the snapshot and the measurement"""
    window: int = 10
    """W: the schedule uses the mean of the last W measurements"""
    burn_in: Optional[int] = None
    """measurements before L first moves from L_min (default: W; the authors' code: 10 with --window 20)"""
    ema_beta: float = 0.1
    """beta of the EMA that moves the batch size towards its target"""
    divergence_low: float = 0.05
    """delta_min: a mean divergence at or below this gives B_max"""
    divergence_high: float = 0.95
    """delta_max: a mean divergence at or above this gives B_min"""
    ref_batch_size: int = 2048
    """M: states from the newest transitions on which the divergence is measured"""
    schedule: Literal["log", "linear"] = "log"
    """interpolation of the batch between the divergence bounds: log | linear"""
    track_divergence: bool = False
    """with --no-adapt, still measure and log the divergence every K gradient steps"""

    # Evaluation
    eval_episodes: int = 100
    """greedy evaluation episodes after training (no life loss, no reward clipping)"""
    eval_epsilon: float = 0.0
    """epsilon of the evaluation policy"""
    eval_num_envs: int = 20
    """parallel environments for the evaluation (each plays an equal share of the episodes)"""
    eval_max_episode_steps: int = 27_000
    """per-episode step cap of the evaluation (27k agent steps = the ALE's 108k frames)"""
    eval_fire_after_life_loss: bool = True
    """in games with FIRE, press it after a lost life as training's resets do (off: as the ABS authors' PQN code)"""
    capture_video: bool = False
    """record the evaluation's first games as MP4 files in <run>/videos/, as a person sees the game (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records: the first the evaluation counts"""

    # Speed (same algorithm; see docs/running.md)
    bf16: bool = False
    """bfloat16 autocast of the CNN encoder when acting and learning (the Q head, targets, loss, divergence: float32)"""


FRAME_STACK = 4
# --resume takes every flag from the checkpoint but these run-control ones, when given; CHECKPOINT_STATE: the
# script's part of a checkpoint (besides abs_utils.RUN_STATE), checked before a --resume uses it.
RUN_CONTROL_FLAGS = (
    "resume", "total_timesteps", "stop_at_step", "extend_schedules", "checkpoint_every", "save_model",
    "log_every_seconds", "cuda", "torch_threads", "env_threads", "track", "wandb_project_name", "wandb_entity",
    "eval_episodes", "eval_epsilon", "eval_num_envs", "eval_max_episode_steps", "eval_fire_after_life_loss",
    "capture_video", "video_episodes", "scalar_every", "bf16",
)
CHECKPOINT_STATE = {"q_network": dict, "target_network": dict, "optimizer": dict, "scheduler": dict,
                    "grad_steps": int}


# ================================================================ the paper's method: the ABS schedule (pure math)
def round_half_up(x: float) -> int:
    """Round to the nearest integer, halves up (Python's round() would send 2.5 to 2)."""
    return int(math.floor(x + 0.5))


def round_to_multiple(x: float, multiple: int) -> int:
    """The batch ABS uses from its float state: the nearest multiple of `multiple` (halves up)."""
    return multiple * round_half_up(x / multiple)


def divergence_to_length(delta_bar: float, L_min: int, L_max: int, delta_min: float, delta_max: float,
                         schedule: str = "log") -> float:
    """L_target: delta_bar >= delta_max gives L_min, delta_bar <= delta_min gives L_max, log (or linear) between."""
    d = min(max(delta_bar, delta_min), delta_max)
    if schedule == "log":
        alpha = math.log(d / delta_min) / math.log(delta_max / delta_min)
    else:
        alpha = (d - delta_min) / (delta_max - delta_min)
    return L_max - alpha * (L_max - L_min)


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


def batch_size_of(scheduler: ABSScheduler, args: Args) -> int:
    """The batch of the next gradient step: the scheduler's float state L (here a batch size in [B_min, B_max])
    rounded to a multiple of --batch-size-multiple, or --batch-size with --no-adapt."""
    return round_to_multiple(scheduler.L, args.batch_size_multiple) if args.adapt else args.batch_size


def measurement_offset(divergence_offset: Optional[int], target_network_frequency: int) -> int:
    """The gradient step of the first measurement: by default mid-way between two target-network copies."""
    return target_network_frequency // 2 if divergence_offset is None else divergence_offset


def measurement_starts(grad_steps: int, adapt_freq: int, offset: int) -> bool:
    """A divergence measurement starts before gradient step `grad_steps`: at offset, offset + K, offset + 2K, ...

    With K a multiple of the target period P (BTR: both 500) and 0 < offset mod P <= P - span, no measured span holds
    a target copy; at offset 0 each span would start with a copy, so delta would only ever see the updates right
    after one.
    """
    return grad_steps >= offset and (grad_steps - offset) % adapt_freq == 0


@torch.no_grad()
def behavioral_divergence(q_new: nn.Module, q_old: nn.Module, states: torch.Tensor) -> float:
    """delta: the fraction of states whose greedy action differs between the two networks."""
    return (q_new(states).argmax(dim=1) != q_old(states).argmax(dim=1)).float().mean().item()


# ================================================================ BTR: prioritised replay of single frames
# Layout: one row per vectorised env step, a circular [T, num_envs] array per field, T = buffer/num_envs. Row t
# holds the newest frame of the observation the agent acted on, the action, the clipped reward and flags. The row
# after an episode end is envpool's reset step (its action is ignored): it keeps the frame of the episode's last
# observation (the bootstrap state) and is never sampled as a transition. 4-frame stacks are rebuilt on sampling
# exactly as envpool built them: envpool keeps its stack across a life loss and, at a game start (game over, time
# limit, first reset), repeats the first frame, so the rebuild repeats the first frame of a game and never reads
# past the oldest row. A row becomes sampleable (max priority) once its n-step window is written; the oldest
# FRAME_STACK - 1 rows are not sampleable, so no stack reaches past the write position.
class SumTree:
    """Binary sum tree over `capacity` leaves (float64); vectorised O(log N) updates and prefix-sum searches."""

    def __init__(self, capacity: int):
        self.depth = max(capacity - 1, 0).bit_length()
        self.size = 1 << self.depth  # leaves live at nodes size .. 2*size-1, the root is node 1
        self.tree = np.zeros(2 * self.size)

    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx):
        return self.tree[np.asarray(idx) + self.size]

    def update(self, idx, values):
        """Set leaves (the last value wins for repeated indices) and recompute their ancestors from their children."""
        nodes = np.asarray(idx, dtype=np.int64) + self.size
        self.tree[nodes] = values
        for _ in range(self.depth):  # repeated parents just write the same sum again: no np.unique (4x faster)
            nodes = nodes >> 1
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def find(self, values):
        """Leaf whose prefix-sum interval holds each value; a zero-priority leaf is never returned."""
        nodes = np.ones(len(values), dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        for _ in range(self.depth):
            left = self.tree[2 * nodes]
            go_right = (values >= left) & (self.tree[2 * nodes + 1] > 0)  # rounding can overshoot a subtree's sum
            values = np.where(go_right, values - left, values)
            nodes = 2 * nodes + go_right
        return nodes - self.size

    def sample(self, batch_size: int):
        """Stratified: one uniform draw in each of batch_size equal slices of the total (numpy's global RNG)."""
        values = (np.arange(batch_size) + np.random.random(batch_size)) * (self.total() / batch_size)
        return self.find(values)


def n_step_returns(rewards, terminated, ended, gamma):
    """[B, n] windows from the sampled step -> (n-step return, bootstrap discount gamma^k or 0 after a terminal, k).

    The sum stops at the first episode end in the window (life loss, game over or time limit); a time-limit end
    bootstraps from the episode's last observation with gamma^k.
    """
    batch, n = rewards.shape
    returns, discount = np.zeros(batch), np.ones(batch)
    steps, alive, done = np.zeros(batch, dtype=np.int64), np.ones(batch, dtype=bool), np.zeros(batch, dtype=bool)
    for j in range(n):
        returns += np.where(alive, discount * rewards[:, j], 0.0)
        discount = np.where(alive, discount * gamma, discount)
        steps += alive
        done |= alive & terminated[:, j]
        alive &= ~ended[:, j]
    return returns, np.where(done, 0.0, discount), steps


class ReplayBuffer:
    """Per-env circular buffer of single 84x84 frames, [T, E] arrays, with a sum tree over its T*E rows."""

    FIELDS = ("frames", "actions", "rewards", "terminated", "ended", "first", "valid")  # the [T, E] arrays

    def __init__(self, buffer_size, num_envs, n_step, gamma, alpha, frame_shape=(84, 84)):
        self.T, self.E, self.n_step, self.gamma, self.alpha = buffer_size // num_envs, num_envs, n_step, gamma, alpha
        T, E = self.T, self.E
        self.frames = np.zeros((T, E) + tuple(frame_shape), dtype=np.uint8)  # newest frame of the acted-on observation
        self.actions = np.zeros((T, E), dtype=np.uint8)
        self.rewards = np.zeros((T, E), dtype=np.float32)
        self.terminated = np.zeros((T, E), dtype=bool)  # the step ended in a terminal state (no bootstrap)
        self.ended = np.zeros((T, E), dtype=bool)  # terminal or time limit: n-step sums stop here
        self.first = np.zeros((T, E), dtype=bool)  # envpool's frame stack restarts here (a new game)
        self.valid = np.zeros((T, E), dtype=bool)  # False on envpool's reset steps: no transition starts here
        self.tree = SumTree(T * E)
        self.max_priority = 1.0  # new transitions get the largest priority seen so far
        self.pos, self.rows_written = 0, 0
        self.new_stream()

    def new_stream(self):
        """The envs were (re)started from a reset: the next row of every env is the first of a game."""
        self.fresh, self.prev_end, self.prev_game_end = (np.ones(self.E, bool), np.zeros(self.E, bool),
                                                         np.zeros(self.E, bool))

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, k).nbytes for k in self.FIELDS) + self.tree.tree.nbytes

    @staticmethod
    def bytes_needed(buffer_size: int) -> int:
        """nbytes before allocating: per transition a frame and 9 bytes of fields, and the float64 sum tree."""
        return buffer_size * (84 * 84 + 9) + 16 * (1 << max(buffer_size - 1, 0).bit_length())

    @property
    def num_transitions(self) -> int:  # stored, sampleable or not
        return min(self.rows_written, self.T) * self.E

    def add(self, frames, actions, rewards, terminated, truncated, game_over):
        """Write one vectorised step (frames [E, 84, 84]: newest frame of the observation the actions were taken on)."""
        t, T, E, env = self.pos, self.T, self.E, np.arange(self.E)
        ended = terminated | truncated
        self.frames[t], self.actions[t], self.rewards[t] = frames, actions, rewards
        self.terminated[t], self.ended[t], self.first[t], self.valid[t] = terminated, ended, self.fresh, ~self.prev_end
        # After the reset step that follows a game end, envpool's stack starts afresh; a life loss keeps it.
        self.fresh = self.prev_end & self.prev_game_end
        self.prev_end, self.prev_game_end = ended, game_over | truncated
        # Row t replaced the oldest data; row t+3 is now among the oldest FRAME_STACK-1 rows, whose stacks would reach
        # past the write position; row t-n now has its whole n-step window written and becomes sampleable.
        idx = [t * E + env, (t + FRAME_STACK - 1) % T * E + env]
        values = [np.zeros(E), np.zeros(E)]
        if self.rows_written >= self.n_step:
            r = (t - self.n_step) % T
            release = env[self.valid[r]]
            idx.append(r * E + release)
            values.append(np.full(len(release), self.max_priority ** self.alpha))
        self.tree.update(np.concatenate(idx), np.concatenate(values))
        self.pos, self.rows_written = (t + 1) % T, self.rows_written + 1

    def stacks(self, rows, envs):
        """Rebuild [B, 4, 84, 84] observations: repeat the first frame of a game (as envpool does) or the oldest row."""
        oldest = self.pos if self.rows_written >= self.T else 0
        idx = np.empty((len(rows), FRAME_STACK), dtype=np.int64)
        idx[:, -1] = cur = np.asarray(rows)
        stop = self.first[cur, envs] | (cur == oldest)
        for j in range(FRAME_STACK - 2, -1, -1):
            cur = np.where(stop, cur, (cur - 1) % self.T)
            idx[:, j] = cur
            stop |= self.first[cur, envs] | (cur == oldest)
        return self.frames[idx, np.asarray(envs)[:, None]]

    def transitions(self, idx):
        """Leaf indices -> states, actions, n-step returns, bootstrap discounts, next states, steps k."""
        rows, envs = idx // self.E, idx % self.E
        window = (rows[:, None] + np.arange(self.n_step)) % self.T
        returns, discounts, steps = n_step_returns(self.rewards[window, envs[:, None]],
                                                   self.terminated[window, envs[:, None]],
                                                   self.ended[window, envs[:, None]], self.gamma)
        return (self.stacks(rows, envs), self.actions[rows, envs].astype(np.int64), returns, discounts,
                self.stacks((rows + steps) % self.T, envs), steps)

    def sample(self, batch_size, beta):
        """Proportional prioritised sample; importance weights (N P_i)^-beta normalised by the batch maximum."""
        idx = self.tree.sample(batch_size)
        p = self.tree.get(idx)
        weights = (p / p.min()) ** -beta
        return (idx, *self.transitions(idx)[:5], weights)

    def update_priorities(self, idx, td_abs, eps=1e-6):
        priorities = td_abs + eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(idx, priorities ** self.alpha)

    def newest_states(self, count):
        """Up to `count` observations drawn without replacement from the newest 2*count/E rows of every env."""
        rows_back = min(self.rows_written, self.T - FRAME_STACK, 2 * math.ceil(count / self.E))
        rows = (self.pos - 1 - np.arange(rows_back)) % self.T
        rows, envs = [a.ravel() for a in np.meshgrid(rows, np.arange(self.E), indexing="ij")]
        keep = self.valid[rows, envs]
        pick = np.random.permutation(int(keep.sum()))[:count]
        return self.stacks(rows[keep][pick], envs[keep][pick])

    def state_dict(self):
        arrays = {k: torch.from_numpy(getattr(self, k)) for k in self.FIELDS}
        return {**arrays, "tree": torch.from_numpy(self.tree.tree), "max_priority": float(self.max_priority),
                "pos": int(self.pos), "rows_written": int(self.rows_written)}

    def load_state_dict(self, state):
        for k in (*self.FIELDS, "tree"):  # checked first: a buffer of another size would fail later, mid-training
            have = (self.tree.tree if k == "tree" else getattr(self, k))
            if tuple(state[k].shape) != have.shape or state[k].numpy().dtype != have.dtype:
                raise ValueError(f"replay {k} is {state[k].numpy().dtype}{list(state[k].shape)}, "
                                 f"this run's is {have.dtype}{list(have.shape)}")
        for k in self.FIELDS:
            setattr(self, k, state[k].numpy())  # adopt the loaded arrays: no second copy of a GB-sized buffer
        self.tree.tree = state["tree"].numpy()
        self.max_priority, self.pos, self.rows_written = state["max_priority"], state["pos"], state["rows_written"]
        # The newest n rows never got their whole n-step window (the envs restart from a reset): drop them.
        self.valid[(self.pos - 1 - np.arange(self.n_step)) % self.T] = False
        self.new_stream()


def per_beta_at(global_step: int, args: Args) -> float:
    """The IS exponent: --per-beta until learning starts, then linear to 1 at the end (0 with --no-per: uniform)."""
    frac = (global_step - args.learning_starts) / max(args.total_timesteps - args.learning_starts, 1)
    return args.per_beta + (1.0 - args.per_beta) * min(max(frac, 0.0), 1.0) if args.per else 0.0


# ================================================================ BTR: network, targets, update, exploration
class NoisyLinear(nn.Module):
    """Factorised Gaussian noisy linear layer (Fortunato et al. 2018); with noise_on False it uses the mean weights."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        scale = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-scale, scale))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * scale))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-scale, scale))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * scale))
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))
        self.noise_on = True
        self.reset_noise()

    @torch.no_grad()
    def reset_noise(self):
        for eps in (self.eps_in, self.eps_out):
            eps.normal_()
            eps.copy_(eps.sign() * eps.abs().sqrt())  # f(x) = sgn(x) sqrt(|x|)

    def forward(self, x):
        if not self.noise_on:
            return F.linear(x, self.weight_mu, self.bias_mu)
        return F.linear(x, self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in),
                        self.bias_mu + self.bias_sigma * self.eps_out)


def reset_noise(network: nn.Module):
    for m in network.modules():
        if isinstance(m, NoisyLinear):
            m.reset_noise()


def set_noise(network: nn.Module, on: bool):
    for m in network.modules():
        if isinstance(m, NoisyLinear):
            m.noise_on = on


class ImpalaResidual(nn.Module):
    """x + conv(relu(conv(relu(x)))), the convs optionally spectrally normalised (BTR)."""

    def __init__(self, channels: int, spectral: bool):
        super().__init__()
        norm = nn.utils.parametrizations.spectral_norm if spectral else (lambda m: m)
        self.conv0 = norm(nn.Conv2d(channels, channels, 3, padding=1))
        self.conv1 = norm(nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


def impala_cnn(model_size: float, spectral: bool, maxpool_size: int) -> nn.Sequential:
    """IMPALA CNN (Espeholt et al. 2018) scaled by model_size: 3 x (conv, max-pool, 2 residual blocks)."""
    layers, c_in = [], FRAME_STACK
    for c in (16, 32, 32):
        c = int(c * model_size)
        layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.MaxPool2d(3, 2, padding=1),
                   ImpalaResidual(c, spectral), ImpalaResidual(c, spectral)]
        c_in = c
    if maxpool_size:
        layers.append(nn.AdaptiveMaxPool2d(maxpool_size))
    return nn.Sequential(*layers, nn.ReLU(), nn.Flatten())


def dqn_cnn() -> nn.Sequential:
    """The Nature DQN encoder (no LayerNorm), for --no-impala; 84x84x4 -> 64*7*7."""
    return nn.Sequential(nn.Conv2d(FRAME_STACK, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())


class BTRNetwork(nn.Module):
    """Encoder -> (IQN cosine embedding of tau) -> dueling streams of noisy layers; returns quantiles [B, N, A]."""

    def __init__(self, num_actions: int, args: Args):
        super().__init__()
        self.iqn, self.num_tau = args.iqn, args.num_tau if args.iqn else 1
        self.encoder = impala_cnn(args.model_size, args.spectral_norm, args.maxpool_size) if args.impala else dqn_cnn()
        with torch.no_grad():
            features = self.encoder(torch.zeros(1, FRAME_STACK, 84, 84)).shape[1]
        if self.iqn:
            self.register_buffer("cos_freqs", math.pi * torch.arange(args.num_cosines, dtype=torch.float32))
            self.cos_embedding = nn.Linear(args.num_cosines, features)

        def stream(out):
            linear = (lambda i, o: NoisyLinear(i, o, args.noisy_sigma0)) if args.noisy else nn.Linear
            return nn.Sequential(linear(features, args.hidden_size),
                                 nn.LayerNorm(args.hidden_size) if args.layer_norm else nn.Identity(), nn.ReLU(),
                                 linear(args.hidden_size, out))

        self.advantage = stream(num_actions)
        self.value = stream(1) if args.dueling else None

    def sample_taus(self, batch: int, device) -> torch.Tensor:
        return torch.rand(batch, self.num_tau, device=device)

    def forward(self, x, taus=None):  # x: uint8 [B, 4, 84, 84]; taus: [B, N] quantile fractions
        h = self.encoder(x.float() / 255.0).unsqueeze(1)  # [B, 1, F]
        # The head always runs in float32, also under --bf16 autocast: a bfloat16 Q-value of size 40 is rounded to
        # 0.25, and Munchausen's log-softmax at temperature 0.03 would turn that into errors of several nats.
        with torch.autocast(h.device.type, enabled=False):
            h = h.float()
            if self.iqn:
                h = h * F.relu(self.cos_embedding(torch.cos(taus.unsqueeze(2) * self.cos_freqs)))  # [B, N, F]
            advantage = self.advantage(h)
            if self.value is None:
                return advantage
            return self.value(h) + advantage - advantage.mean(dim=2, keepdim=True)

    def q_values(self, x, taus=None):
        """Mean over quantiles; random fractions unless given (the acting policy)."""
        return self(x, self.sample_taus(x.shape[0], x.device) if taus is None else taus).mean(dim=1)


class GreedyQ:
    """Deterministic Q-values: noise off, spectral norm without power iteration, quantile midpoints as fractions,
    computed in chunks. The greedy policy ABS compares across updates and the evaluation plays."""

    def __init__(self, network: BTRNetwork, chunk: int = 256):
        self.network, self.chunk = network, chunk

    @torch.no_grad()
    def __call__(self, x):
        net, was_training = self.network, self.network.training
        net.eval()
        set_noise(net, False)
        taus = ((torch.arange(net.num_tau, device=x.device) + 0.5) / net.num_tau).expand(min(len(x), self.chunk), -1)
        q = torch.cat([net(c, taus[: len(c)]).mean(dim=1) for c in x.split(self.chunk)])
        set_noise(net, True)
        net.train(was_training)
        return q


def munchausen_iqn_target(next_quantiles, q_online, actions, returns, discounts, alpha, tau, l0):
    """Munchausen-IQN target quantiles [B, N'] (Vieillard et al. 2020, as in BTR's code).

    next_quantiles: target network at the bootstrap state [B, N', A]; q_online: the online network's mean Q at the
    sampled state [B, A] (BTR takes the log-policy bonus from the online network, detached); returns: n-step return;
    discounts: gamma^k, 0 after a terminal. tau * log_softmax(q / tau) = q - max q - tau * logsumexp((q - max q) / tau).
    """
    log_pi_next = F.log_softmax(next_quantiles.mean(dim=1) / tau, dim=1)  # [B, A]
    soft_next = (log_pi_next.exp().unsqueeze(1) * (next_quantiles - tau * log_pi_next.unsqueeze(1))).sum(dim=2)
    log_pi = F.log_softmax(q_online / tau, dim=1).gather(1, actions.unsqueeze(1)).squeeze(1)
    bonus = alpha * (tau * log_pi).clamp(min=l0, max=0.0)
    return (returns + bonus).unsqueeze(1) + discounts.unsqueeze(1) * soft_next


def iqn_target(next_quantiles, returns, discounts):
    """n-step IQN target: the target network's quantiles of its own greedy (quantile-mean) action."""
    greedy = next_quantiles.mean(dim=1).argmax(dim=1)
    chosen = next_quantiles.gather(2, greedy[:, None, None].expand(-1, next_quantiles.shape[1], 1)).squeeze(2)
    return returns.unsqueeze(1) + discounts.unsqueeze(1) * chosen


def quantile_huber_loss(quantiles, taus, targets, kappa):
    """quantiles [B, N] at fractions taus [B, N] (None: plain Huber), targets [B, N'] -> loss [B], mean |TD| [B].

    Pairwise TD errors; |tau - 1{td < 0}| * Huber_kappa(td) / kappa, summed over N and averaged over N'.
    """
    td = targets.unsqueeze(1) - quantiles.unsqueeze(2)  # [B, N, N']
    abs_td = td.abs()
    huber = torch.where(abs_td <= kappa, 0.5 * td.pow(2), kappa * (abs_td - 0.5 * kappa))
    weight = (taus.unsqueeze(2) - (td.detach() < 0).float()).abs() if taus is not None else 1.0
    return (weight * huber / kappa).sum(dim=1).mean(dim=1), abs_td.detach().mean(dim=(1, 2))


def btr_update(q_network, target_network, optimizer, batch, args, device):
    """One gradient step on a replay batch; returns mean loss, mean Q of the taken actions and |TD| priorities."""
    _, states, actions, returns, discounts, next_states, weights = batch
    states, next_states = torch.from_numpy(states).to(device), torch.from_numpy(next_states).to(device)
    actions = torch.from_numpy(actions).to(device)
    returns, discounts, weights = (torch.as_tensor(a, dtype=torch.float32, device=device)
                                   for a in (returns, discounts, weights))
    q_network.train()  # spectral norm: one power iteration per gradient step
    taus = q_network.sample_taus(len(states), device)
    with autocast(device, args.bf16):
        quantiles = q_network(states, taus).float()  # [B, N, A]
        with torch.no_grad():
            reset_noise(target_network)
            next_quantiles = target_network(next_states, target_network.sample_taus(len(states), device)).float()
    with torch.no_grad():
        if args.munchausen:
            targets = munchausen_iqn_target(next_quantiles, quantiles.mean(dim=1), actions, returns, discounts,
                                            args.munchausen_alpha, args.munchausen_tau, args.munchausen_clip)
        else:
            targets = iqn_target(next_quantiles, returns, discounts)
    chosen = quantiles.gather(2, actions[:, None, None].expand(-1, quantiles.shape[1], 1)).squeeze(2)  # [B, N]
    per_sample, td_abs = quantile_huber_loss(chosen, taus if args.iqn else None, targets, args.kappa)
    loss = (weights * per_sample).mean()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
    if not torch.isfinite(grad_norm):  # a non-finite loss or gradient: stop before the step
        raise U.NonFiniteLoss(f"non-finite loss or gradient (loss {loss.item()}, grad norm {grad_norm.item()})")
    optimizer.step()
    q_network.eval()
    return loss.item(), chosen.detach().mean().item(), td_abs.cpu().numpy()


def autocast(device: torch.device, bf16: bool):
    """bfloat16 autocast on `device` with --bf16, a no-op context without (callers cast outputs back to float32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    return max(end_e, start_e + (end_e - start_e) * t / max(duration, 1.0))


def geometric_schedule(start_e: float, end_e: float, time_constant: float, t: int) -> float:
    """BTR's epsilon after t stored transitions: each one moves it 1/time_constant of the way to end_e."""
    return end_e + (start_e - end_e) * (1.0 - 1.0 / max(time_constant, 1.0)) ** t


def exploration_epsilon(t: int, schedule: str, start_e: float, end_e: float, exploration_steps: int,
                        off_at: Optional[int] = None) -> float:
    """Epsilon at env step t (summed over the envs); 0 from off_at on (None: never switched off)."""
    if off_at is not None and t >= off_at:
        return 0.0
    if schedule == "geometric":
        return geometric_schedule(start_e, end_e, exploration_steps, t)
    return linear_schedule(start_e, end_e, exploration_steps, t)


def epsilon_off_step(total_timesteps: int, off_fraction: float, learning_starts: int, noisy: bool) -> Optional[int]:
    """BTR's switch-off: with noisy nets, epsilon-greedy stops once both learning has started and the given fraction
    of training is done; without noisy nets epsilon-greedy is the only exploration and stays on."""
    return max(learning_starts, math.ceil(off_fraction * total_timesteps)) if noisy else None


def select_actions(q_values: torch.Tensor, epsilon: float):
    """Epsilon-greedy on the device; returns actions and max_a Q."""
    values, greedy = q_values.max(dim=1)
    explore = torch.rand(q_values.shape[0], device=q_values.device) < epsilon
    random_actions = torch.randint(0, q_values.shape[1], greedy.shape, device=q_values.device)
    return torch.where(explore, random_actions, greedy), values


def make_envs(env_id, num_envs, seed, train, max_episode_steps=27_000, num_threads=0, render_mode=None):
    # Training uses life loss as episode end and clipped rewards; evaluation plays whole games unclipped.
    # render_mode "rgb_array": envs.render(env_ids) gives the emulator's RGB screens (--capture-video)
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, episodic_life=train,
                        reward_clip=train, max_episode_steps=max_episode_steps, num_threads=num_threads,
                        render_mode=render_mode)


# ================================================================ this script's flags and evaluation
def is_atari(env_id: str) -> bool:
    try:
        return type(envpool.make_spec(env_id)).__name__ == "AtariEnvSpec"
    except Exception:
        return False


def flag_problems(a: Args):
    """(ok, message) rows for this script's flags, checked in order after abs_utils.common_problems (the first
    failing row is the error); one-flag rows come first, so that the rows relating several flags may divide by them."""
    yield (a.divergence_offset is None or a.divergence_offset >= 0,
           f"--divergence-offset must be >= 0, got {a.divergence_offset!r}")
    yield is_atari(a.env_id), f"--env-id must be an envpool Atari id such as Breakout-v5, got {a.env_id!r}"
    yield from U.in_domain(a, ">= 1", "total_timesteps", "buffer_size", "batch_size", "batch_size_min",
                           "batch_size_max", "batch_size_multiple", "adapt_freq", "divergence_span", "window",
                           "ref_batch_size", "n_step", "num_tau", "num_cosines", "hidden_size",
                           "target_network_frequency", "scalar_every")
    yield from U.in_domain(a, "in [1, 2^31)", "num_envs", "eval_num_envs", "eval_max_episode_steps")
    yield a.burn_in is None or a.burn_in >= 1, f"--burn-in must be >= 1, got {a.burn_in!r}"
    yield from U.in_domain(a, ">= 0", "checkpoint_every", "log_every_seconds", "eval_episodes", "learning_starts",
                           "exploration_steps", "maxpool_size", "noisy_sigma0")
    yield from U.in_domain(a, "> 0", "adam_eps", "max_grad_norm", "kappa", "munchausen_tau",
                           "model_size")
    yield from U.in_domain(a, "in (0, 1]", "gamma", "ema_beta")
    yield from U.in_domain(a, "in (0, 1e37]", "learning_rate")
    yield from U.in_domain(a, "in [0, 1]", "start_e", "end_e", "eval_epsilon", "per_alpha", "per_beta",
                           "munchausen_alpha", "epsilon_off_fraction")
    yield a.munchausen_clip <= 0, f"--munchausen-clip must be <= 0, got {a.munchausen_clip!r}"
    yield (not a.impala or int(16 * a.model_size) >= 1,
           f"--model-size must give at least one channel (>= 1/16), got {a.model_size}")
    yield (a.buffer_size % a.num_envs == 0,
           f"--buffer-size ({a.buffer_size}) must be a multiple of --num-envs ({a.num_envs})")
    yield (a.buffer_size // a.num_envs >= 2 * (a.n_step + FRAME_STACK), "--buffer-size must give each env at least "
           f"{2 * (a.n_step + FRAME_STACK)} rows (--n-step {a.n_step}), got {a.buffer_size // a.num_envs}")
    yield (a.learning_starts <= a.buffer_size,
           f"--learning-starts ({a.learning_starts}) must be <= --buffer-size ({a.buffer_size})")
    yield (a.batch_size_min <= a.batch_size_max,
           f"--batch-size-min ({a.batch_size_min}) must be <= --batch-size-max ({a.batch_size_max})")
    for name in ("batch_size_min", "batch_size_max"):
        yield (not a.adapt or getattr(a, name) % a.batch_size_multiple == 0, f"{U.flag_of(name)} "
               f"({getattr(a, name)}) must be a multiple of --batch-size-multiple ({a.batch_size_multiple})")
    yield (a.divergence_span <= a.adapt_freq,
           f"--divergence-span ({a.divergence_span}) must be <= --adapt-freq ({a.adapt_freq})")
    yield (0.0 < a.divergence_low < a.divergence_high <= 1.0, "--divergence-low and --divergence-high must satisfy "
           f"0 < low < high <= 1, got {a.divergence_low} and {a.divergence_high}")
    B, flag = (a.batch_size_max, "--batch-size-max") if a.adapt else (a.batch_size, "--batch-size")
    yield B <= a.buffer_size, f"{flag} ({B}) must be <= --buffer-size ({a.buffer_size}), which it samples from"
    yield U.memory_problem(f"the replay buffer (--buffer-size {a.buffer_size})",
                           lambda: ReplayBuffer.bytes_needed(a.buffer_size), False)
    # Every flag that sizes the networks or the batch is named: any of them may be the one too large.
    sizes = (["model_size", "maxpool_size"] if a.impala else []) + ["hidden_size"] + (
        ["num_cosines", "num_tau"] if a.iqn else [])
    yield U.memory_problem(f"training ({', '.join(f'{U.flag_of(n)} {getattr(a, n)}' for n in sizes)}, {flag} {B})",
                           lambda: training_bytes(a, B), a.cuda)


def training_bytes(a: Args, B: int) -> int:
    """A lower bound on the device memory of training, from the flags: the online and target networks with Adam's
    gradient and two moments (5 copies of the parameters), a batch's observations and its IQN embeddings (three
    forward passes of [B, num_tau, features] float32)."""
    with torch.device("meta"):  # shapes only: nothing is allocated
        network = BTRNetwork(18, a)  # 18: the full Atari action set, the most a game has
    features = network.cos_embedding.out_features if a.iqn else 0
    return (5 * sum(p.numel() * p.element_size() for p in network.parameters())
            + B * (2 * FRAME_STACK * 84 * 84 + 3 * a.num_tau * features * 4))


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """The flags (with --resume, the checkpoint's for every flag not given); exit 2 with one line on bad input."""
    return U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, CHECKPOINT_STATE, argv)


@torch.no_grad()
def evaluate(q_network, args, seed, device, run_dir=None):
    """--eval-episodes whole games, epsilon-greedy (--eval-epsilon), by abs_utils.play_atari_games;
    --eval-fire-after-life-loss presses FIRE on the step after a lost life in games that have it (docs/btr.md).
    With --capture-video, the first games go to <run_dir>/videos/ at 15 frames a second (60 Hz, frame skip 4)."""
    def act(obs):
        with autocast(device, args.bf16):
            q_values = q_network(torch.from_numpy(obs).to(device)).float()
        return select_actions(q_values, args.eval_epsilon)[0].cpu().numpy()

    videos = U.videos_of(args, run_dir, fps=15)
    envs = make_envs(args.env_id, min(args.eval_num_envs, args.eval_episodes), seed, train=False,
                     max_episode_steps=args.eval_max_episode_steps, render_mode=videos and "rgb_array")
    fire = U.fire_action(args.env_id) if args.eval_fire_after_life_loss else None
    return U.play_atari_games(envs, act, args.eval_episodes, fire, videos=videos)


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "inference", "replay", "update", "adapt"), unit="step")
    device = run.device

    envs = make_envs(args.env_id, args.num_envs, run.env_seed, train=True, num_threads=args.env_threads)
    q_network = BTRNetwork(envs.action_space.n, args).to(device).eval()  # train mode only inside btr_update
    target_network = copy.deepcopy(q_network).requires_grad_(False)
    snapshot = copy.deepcopy(q_network).requires_grad_(False)  # theta: the weights before the measured span
    greedy, greedy_snapshot = GreedyQ(q_network), GreedyQ(snapshot)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps)
    E = args.num_envs
    # Fixed-batch mode (--no-adapt): the batch is --batch-size throughout; the scheduler only records divergences.
    B_min, B_max = (args.batch_size_min, args.batch_size_max) if args.adapt else (args.batch_size, args.batch_size)
    scheduler = ABSScheduler(B_min, B_max, args.window, args.ema_beta, args.divergence_low,
                             args.divergence_high, args.schedule, args.burn_in)
    replay = ReplayBuffer(args.buffer_size, E, args.n_step, args.gamma, args.per_alpha if args.per else 0.0)

    global_step, grad_steps = 0, 0
    if checkpoint is not None:
        U.load_state(args.resume, checkpoint, "q_network", q_network.load_state_dict)
        U.load_state(args.resume, checkpoint, "target_network", target_network.load_state_dict)
        U.load_state(args.resume, checkpoint, "optimizer", optimizer.load_state_dict)
        U.load_state(args.resume, checkpoint, "scheduler", scheduler.load_state_dict)
        global_step, grad_steps = checkpoint["global_step"], checkpoint["grad_steps"]
        if "replay" in checkpoint:  # popped: the Run keeps the checkpoint, and the buffer may be gigabytes
            U.load_state(args.resume, checkpoint, "replay", replay.load_state_dict)
            del checkpoint["replay"]
            note = f"replay buffer restored ({replay.num_transitions} transitions)"
        else:
            note = f"no replay buffer in the checkpoint: refilling {args.learning_starts} transitions before learning"
        print(f"resumed {run.checkpoint_path} at global_step {global_step} (environments restart from a reset "
              f"seeded with {run.env_seed}); {note}")
    run.begin(global_step)
    run.log(global_step, {"perf/storage_bytes": replay.nbytes})
    print(f"run {run.dir} on {device}; replay {replay.nbytes / 2**30:.2f} GiB for {replay.T * E} transitions "
          f"({replay.nbytes / (replay.T * E):.0f} bytes each)")

    def state():  # what a checkpoint holds besides what the Run adds (RNGs, flags, timings)
        return {"q_network": q_network.state_dict(), "target_network": target_network.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "global_step": global_step,
                "grad_steps": grad_steps,
                **({"replay": replay.state_dict()} if args.checkpoint_buffer else {})}  # GBs: only when asked for

    obs, _ = envs.reset()
    ep_return, recent_returns = np.zeros(E), deque(maxlen=20)
    losses, mean_qs = [], []  # of the gradient steps since the scalars were last written
    vector_steps = 0
    measuring = args.adapt or args.track_divergence
    measure_offset = measurement_offset(args.divergence_offset, args.target_network_frequency)
    epsilon_off = epsilon_off_step(args.total_timesteps, args.epsilon_off_fraction, args.learning_starts, args.noisy)
    ref_states, measure_at = None, None  # a divergence measurement in progress (not checkpointed)
    while global_step < run.stop_step:  # --total-timesteps, or --stop-at-step
        with run.timed("inference"):
            epsilon = exploration_epsilon(global_step, args.epsilon_schedule, args.start_e, args.end_e,
                                          args.exploration_steps, epsilon_off)
            with torch.no_grad(), autocast(device, args.bf16):
                reset_noise(q_network)
                q_values = q_network.q_values(torch.from_numpy(obs).to(device)).float()
            action, _ = select_actions(q_values, epsilon)
            action_np = action.cpu().numpy()
        with run.timed("env"):
            next_obs, reward, term, trunc, info = envs.step(action_np)
        with run.timed("replay"):  # storing the step, and its bookkeeping
            replay.add(obs[:, -1], action_np, reward, term, trunc, info["terminated"].astype(bool))
            obs = next_obs
            global_step += E
            vector_steps += 1
            # Episode statistics of whole games (not lives), unclipped, vectorised over the envs.
            ep_return += info["reward"]
            game_over = info["terminated"].astype(bool) | trunc
            if game_over.any():
                run.log_games(ep_return[game_over], info["elapsed_step"][game_over], global_step)
                recent_returns.extend(ep_return[game_over].tolist())
                ep_return[game_over] = 0.0

        # One gradient step per vectorised env step, once the buffer holds --learning-starts transitions.
        if replay.num_transitions >= args.learning_starts and replay.tree.total() > 0:
            if measuring and ref_states is None and measurement_starts(grad_steps, args.adapt_freq, measure_offset):
                with run.timed("adapt"):
                    snapshot.load_state_dict(q_network.state_dict())
                    ref_states = torch.from_numpy(replay.newest_states(args.ref_batch_size)).to(device)
                    measure_at = grad_steps + args.divergence_span
            with run.timed("replay"):
                batch = replay.sample(batch_size_of(scheduler, args), per_beta_at(global_step, args))
            with run.timed("update"):  # with the priority write (a sum-tree update, ~2% of the replay phase)
                if grad_steps % args.target_network_frequency == 0:
                    target_network.load_state_dict(q_network.state_dict())
                try:
                    loss, mean_q, td_abs = btr_update(q_network, target_network, optimizer, batch, args, device)
                except U.NonFiniteLoss as e:  # checkpoint_nonfinite.pt holds the state before this step; exit 3
                    run.fail(global_step, e, state)
                replay.update_priorities(batch[0], td_abs)
            grad_steps += 1
            losses.append(loss)
            mean_qs.append(mean_q)

            if ref_states is not None and grad_steps == measure_at:
                with run.timed("adapt"):
                    delta = behavioral_divergence(greedy, greedy_snapshot, ref_states)
                    if args.adapt:
                        scheduler.update(delta)
                    else:  # fixed batch: the divergence is only logged (--track-divergence)
                        scheduler.record(delta)
                    ref_states = None
                run.log(global_step, {"adapt/divergence": delta, "adapt/divergence_mean": scheduler.delta_bar,
                                      "adapt/batch_size": batch_size_of(scheduler, args)})

        sps = run.sps(global_step)
        if vector_steps % args.scalar_every == 0 or global_step >= args.total_timesteps:
            mean_losses = {"losses/td_loss": np.mean(losses), "losses/q_values": np.mean(mean_qs)} if losses else {}
            run.log(global_step, {"charts/SPS": sps, "charts/epsilon": epsilon,
                                  "charts/per_beta": per_beta_at(global_step, args), **mean_losses}, perf=True)
            losses, mean_qs = [], []
        window = f" | delta_bar {scheduler.delta_bar:.3f}" if scheduler.history else ""  # once a measurement exists
        run.progress(global_step, sps, f"batch {batch_size_of(scheduler, args)}{window} | grad steps {grad_steps} "
                     f"| buffer {replay.num_transitions} | eps {epsilon:.3f}", recent_returns)
        run.checkpoint(global_step, E, state)  # and on SIGTERM/SIGINT: checkpoint, exit 128 + n
    envs.close()
    run.end_training()

    if args.save_model:
        run.save_model({"q_network": q_network.state_dict()})
    returns, lengths, capped, action_counts = [], [], 0, None
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes (epsilon {args.eval_epsilon}, "
              f"cap {args.eval_max_episode_steps} steps)")
        returns, lengths, capped, action_counts = evaluate(greedy, args, args.seed + 10_000, device, run.dir)
    run.finish(global_step, returns, lengths, capped, action_counts)
