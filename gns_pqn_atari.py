"""PQN + the Gradient Noise Scale (GNS) batch schedule on envpool Atari, one file in the style of CleanRL.

The prior-art baseline of "Scalable On-Policy Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML
2026): abs_pqn_atari.py with only the batch-size controller replaced. GNS (McCandlish et al. 2018) estimates the
simple noise scale B_simple = tr(S) / |G|^2 from micro-batch gradients of the current batch and sets the rollout
length L = B_simple / E: a noisier gradient gets a larger batch. `--no-adapt --num-steps L` gives the fixed-batch
baselines (Small 16, Vanilla 32, Large 64).

    python gns_pqn_atari.py --env-id Breakout-v5 --seed 1     # --help lists every flag

Reading order: Args; the GNS schedule, then PQN; this script's flag checks and evaluation; the training loop at
the bottom. The run machinery (flag parsing, resume, checkpoints, logging, result files) is in abs_utils/, which a
copy of this script takes along.
"""
import abs_utils as U
U.catch_signals()  # first: SIGINT/SIGTERM during the slow imports below are one line, not a traceback

import math
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

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
    save_model: bool = False
    """write the final Q-network weights to <run>/model.pt"""
    log_every_seconds: float = 5.0
    """at most one progress line per this many seconds"""

    # PQN
    env_id: str = "Breakout-v5"
    """an envpool Atari id, e.g. Breakout-v5"""
    total_timesteps: int = 20_000_000
    """total environment steps (summed over the envs)"""
    learning_rate: float = 2.5e-4
    """RAdam learning rate (constant unless --anneal-lr)"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over --total-timesteps (as the authors' GNS code; the paper's PQN: off)"""
    num_envs: int = 128
    """number of parallel envpool environments E"""
    num_minibatches: int = 4
    """minibatches per epoch (fixed; their size grows with L)"""
    gamma: float = 0.99
    """discount factor"""
    q_lambda: float = 0.65
    """lambda of the Q(lambda) targets"""
    max_grad_norm: float = 10.0
    """gradient-norm clip"""
    start_e: float = 1.0
    """initial exploration epsilon"""
    end_e: float = 0.001
    """final exploration epsilon"""
    exploration_fraction: float = 0.1
    """fraction of total-timesteps over which epsilon decays linearly"""
    network: Literal["pqn", "pqn-l", "pqn-xl"] = "pqn"
    """Q-network: pqn (Nature CNN) | pqn-l (wide CNN + 5 residual blocks) | pqn-xl (10 blocks)"""

    # GNS
    adapt: bool = True
    """adapt the rollout length with GNS (--no-adapt: fixed --num-steps)"""
    num_steps: int = 32
    """rollout length L when --no-adapt"""
    num_steps_min: int = 16
    """L_min, the shortest rollout GNS uses (and the length before the first estimate unless --gns-start-steps)"""
    num_steps_max: int = 64
    """L_max, the longest rollout GNS uses (storage is allocated at this length)"""
    gns_freq: int = 50
    """K: estimate the gradient noise scale every K iterations"""
    gns_micro_batches: int = 8
    """m: the batch is split into m equal micro-batches, one gradient each (--num-envs must divide by m)"""
    gns_timing: Literal["before", "after"] = "before"
    """before: estimate before iterations 0, K, 2K, ..; after: after the K-th, 2K-th, .. update (authors' code)"""
    gns_micro_batching: Literal["shuffled", "contiguous"] = "shuffled"
    """shuffled: random micro-batches | contiguous: slices of the time-major batch (authors' code)"""
    gns_start_steps: int = 0
    """rollout length until the first estimate (0: L_min; the authors' code starts at 32)"""
    gns_fixed_epochs: bool = False
    """run --update-epochs epochs whatever L is (the authors' code) instead of the epoch rule"""
    update_epochs: int = 2
    """base epochs at the reference length (also the floor of the epoch rule)"""
    epochs_ref_steps: int = 32
    """reference length of the epoch rule: epochs = max(base, round(base * L / ref))"""

    # Evaluation
    eval_episodes: int = 100
    """greedy evaluation episodes after training (no life loss, no reward clipping)"""
    eval_epsilon: float = 0.0
    """epsilon of the evaluation policy"""
    eval_protocol: Literal["quota", "first-finished"] = "quota"
    """quota: each env plays an equal share of the games (unbiased); first-finished: the first to end (the authors')"""
    eval_num_envs: int = 20
    """parallel environments for the evaluation (the authors' code: 100, with --eval-protocol first-finished)"""
    eval_max_episode_steps: int = 27_000
    """per-episode step cap of the evaluation (27k agent steps = the ALE's 108k frames)"""
    eval_fire_after_life_loss: bool = True
    """in games with FIRE, press it on the step after a lost life as training's resets do (off: the authors' code)"""
    capture_video: bool = False
    """record the evaluation's first games as MP4 files in <run>/videos/, as a person sees the game (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records: the first the evaluation counts"""

    # Speed (same algorithm; see docs/running.md)
    bf16: bool = False
    """run the Q-network under bfloat16 autocast when acting and learning (targets, loss, GNS estimate stay float32)"""
    compile: bool = False
    """torch.compile the Q-network to act and learn (compiles for a while at start and again when L first changes)"""


class NetworkConfig(NamedTuple):
    channels: tuple  # the three conv layers' output channels
    residual_blocks: int  # Multi-Skip blocks in the MLP head (0: one dense layer, as PQN)


NETWORKS = {"pqn": NetworkConfig(channels=(32, 64, 64), residual_blocks=0),
            "pqn-l": NetworkConfig(channels=(64, 128, 128), residual_blocks=5),
            "pqn-xl": NetworkConfig(channels=(64, 128, 128), residual_blocks=10)}
# --resume takes every flag from the checkpoint but these run-control ones, when given.
RUN_CONTROL_FLAGS = (
    "resume", "total_timesteps", "stop_at_step", "extend_schedules", "checkpoint_every", "save_model",
    "log_every_seconds", "cuda", "torch_threads", "env_threads", "track", "wandb_project_name", "wandb_entity",
    "eval_episodes", "eval_epsilon", "eval_protocol", "eval_num_envs", "eval_max_episode_steps",
    "eval_fire_after_life_loss", "capture_video", "video_episodes", "bf16", "compile",
)
# The script's part of a checkpoint (besides abs_utils.RUN_STATE), checked before a --resume uses it.
CHECKPOINT_STATE = {"q_network": dict, "optimizer": dict, "scheduler": dict, "iteration": int}


# ================================================================ the GNS schedule
def round_half_up(x: float) -> int:
    """Round to the nearest integer, halves up (Python's round() would send 2.5 to 2)."""
    return int(math.floor(x + 0.5))


def update_epochs_for(L: int, base_epochs: int, ref_steps: int) -> int:
    """Gradient-intensity compensation: updates per transition stay constant as L grows."""
    return max(base_epochs, round_half_up(base_epochs * L / ref_steps))


def gns_update_epochs(L: int, base_epochs: int, ref_steps: int, fixed: bool) -> int:
    """The epoch rule, or with fixed (--gns-fixed-epochs, the authors' GNS code) base_epochs whatever L is."""
    return base_epochs if fixed else update_epochs_for(L, base_epochs, ref_steps)


def gns_estimates_in(iteration: int, gns_freq: int, timing: str) -> bool:
    """Whether 0-based `iteration` estimates. before: ahead of the update of iterations 0, K, 2K, ...;
    after: once the update of iterations K-1, 2K-1, ... is done, i.e. after the K-th, 2K-th, ... update
    (the authors' code: its first estimate comes after 50 updates at its starting L)."""
    return (iteration + (timing == "after")) % gns_freq == 0


def micro_batch_order(batch: int, micro_batching: str, device) -> torch.Tensor:
    """shuffled: a random permutation, so each micro-batch mixes time steps and envs; contiguous: the stored
    order, so with a time-major batch of E envs each micro-batch holds about L / m consecutive steps of every env
    (exactly that when m divides L; the authors' code; consecutive steps are correlated, raising tr(S) and B_simple)."""
    if micro_batching == "shuffled":
        return torch.randperm(batch, device=device)
    return torch.arange(batch, device=device)


def gns_estimate(micro_grads: torch.Tensor, batch_size: int) -> tuple[float, float, float]:
    """McCandlish et al. (2018), appendix A: unbiased tr(S) and |G|^2 from m micro-batch gradients [m, P].

    Row i is the gradient of the mean loss over b = batch_size / m samples, so Cov(g_i) = S / b and
    E ||g_bar||^2 = |G|^2 + tr(S) / B. Returns (tr_S, G2, B_simple = tr_S / G2); B_simple is nan when
    G2 <= 0 (or non-finite): the estimate is undefined. Pure: computed in float64, no side effects.
    """
    g = micro_grads.detach().double()
    m = g.shape[0]
    if m < 2:
        raise ValueError(f"gns_estimate needs at least 2 micro-batch gradients, got {m}")
    b = batch_size / m
    g_bar = g.mean(dim=0)
    tr_S = b / (m - 1) * (g - g_bar).pow(2).sum().item()
    G2 = g_bar.pow(2).sum().item() - tr_S / batch_size
    return tr_S, G2, (tr_S / G2 if G2 > 0.0 else float("nan"))


def micro_batch_gradients(q_network, obs, actions, returns, valid, num_micro_batches, perm=None):
    """[m, P]: the flattened gradient of pqn_update's masked MSE (before clipping) on each of m equal
    micro-batches, taken in `perm` order (default: as stored). One backward pass each, through
    torch.autograd.grad, so the parameters' .grad and the optimizer state are left untouched."""
    batch = obs.shape[0]
    if batch % num_micro_batches:
        raise ValueError(f"a batch of {batch} does not split into {num_micro_batches} equal micro-batches")
    b = batch // num_micro_batches
    order = torch.arange(batch, device=obs.device) if perm is None else perm
    params = [p for p in q_network.parameters() if p.requires_grad]
    grads = []
    for i in range(num_micro_batches):
        idx = order[i * b : (i + 1) * b]
        q = q_network(obs[idx]).gather(1, actions[idx].unsqueeze(1)).squeeze(1)
        w = valid[idx]
        loss = (w * (q - returns[idx]).pow(2)).sum() / w.sum().clamp(min=1.0)
        grads.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]))
    return torch.stack(grads)


def learn_with_gns(q_network, optimizer, batch, epochs, args, forward, estimate):
    """One iteration's pqn_update of batch = (obs, actions, returns, valid); with `estimate`, a GNS estimate on the
    same batch (returns and valid included) taken before the update (--gns-timing before: at the weights that
    collected the batch and gave its targets) or after it (after: at the weights just fitted to it, as the authors'
    code does). The micro-batch gradients always use the plain float32 module. Returns (td_loss, mean_q,
    (tr_S, G2, B_simple) or None, seconds spent on the estimate)."""
    def gns():
        t0 = time.perf_counter()
        obs = batch[0]
        order = micro_batch_order(obs.shape[0], args.gns_micro_batching, obs.device)
        grads = micro_batch_gradients(q_network, *batch, args.gns_micro_batches, order)
        return gns_estimate(grads, obs.shape[0]), time.perf_counter() - t0

    result, seconds = None, 0.0
    if estimate and args.gns_timing == "before":
        result, seconds = gns()
    td_loss, mean_q = pqn_update(q_network, optimizer, batch, epochs, args, forward)
    if estimate and args.gns_timing == "after":
        result, seconds = gns()
    return td_loss, mean_q, result, seconds


class GNSScheduler:
    """L = clip(round(B_simple / E), L_min, L_max) after each estimate; an undefined one (|G|^2 <= 0) keeps L.

    The public code drops to L_min when the estimate is undefined; here it is kept and counted.
    """

    def __init__(self, L_min, L_max, num_envs, L_start=None):
        self.L_min, self.L_max, self.num_envs = L_min, L_max, num_envs
        self.L = L_min if L_start is None else L_start  # the length until the first estimate
        self.b_simple = float("nan")  # the last estimate (nan: none yet, or undefined)
        self.num_estimates = 0
        self.num_undefined = 0

    @property
    def num_steps(self) -> int:
        return self.L

    def update(self, tr_S: float, G2: float) -> int:
        self.num_estimates += 1
        if not G2 > 0.0:  # no positive signal estimate (nan too): B_simple is undefined, keep L
            self.num_undefined += 1
            self.b_simple = float("nan")
            return self.L
        self.b_simple = tr_S / G2
        self.L = round_half_up(min(max(self.b_simple / self.num_envs, self.L_min), self.L_max))
        return self.L

    def state_dict(self):
        return {"L": self.L, "b_simple": self.b_simple, "num_estimates": self.num_estimates,
                "num_undefined": self.num_undefined}

    def load_state_dict(self, state):
        self.L, self.b_simple = int(state["L"]), float(state["b_simple"])
        self.num_estimates, self.num_undefined = int(state["num_estimates"]), int(state["num_undefined"])


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


def nature_cnn(c1: int, c2: int, c3: int) -> nn.Sequential:
    """Nature DQN encoder with LayerNorm after every conv (PQN); 84x84x4 -> c3*7*7."""
    return nn.Sequential(
        nn.Conv2d(4, c1, 8, stride=4), nn.LayerNorm([c1, 20, 20]), nn.ReLU(),
        nn.Conv2d(c1, c2, 4, stride=2), nn.LayerNorm([c2, 9, 9]), nn.ReLU(),
        nn.Conv2d(c2, c3, 3, stride=1), nn.LayerNorm([c3, 7, 7]), nn.ReLU(),
        nn.Flatten(),
    )


class ResidualBlock(nn.Module):
    """Multi-Skip block (Lee et al. 2025): relu(h + body(h)) + p, body = Linear-LN-ReLU-Linear-LN and p the
    global skip (the head's input projection), added after the block's activation as in the authors' code."""

    def __init__(self, dim: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.ReLU(),
                                  nn.Linear(dim, dim), nn.LayerNorm(dim))

    def forward(self, h, projection):
        return F.relu(h + self.body(h)) + projection


class QNetwork(nn.Module):
    """pqn: Nature CNN + 512 LN ReLU dense layer. pqn-l/-xl: wide CNN + Multi-Skip residual MLP head, whose
    input projection is Linear + LN without an activation, then the residual blocks, then the output layer."""

    def __init__(self, num_actions: int, network: str = "pqn", hidden: int = 512):
        super().__init__()
        config = NETWORKS[network]
        self.encoder = nature_cnn(*config.channels)
        activation = [nn.ReLU()] if config.residual_blocks == 0 else []
        self.projection = nn.Sequential(nn.Linear(config.channels[2] * 7 * 7, hidden), nn.LayerNorm(hidden),
                                        *activation)
        self.blocks = nn.ModuleList(ResidualBlock(hidden) for _ in range(config.residual_blocks))
        self.head = nn.Linear(hidden, num_actions)
        for m in self.modules():  # CleanRL's PQN initialisation: orthogonal with gain sqrt(2), zero bias
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(m.weight, math.sqrt(2))
                nn.init.zeros_(m.bias)

    def forward(self, x):  # x: uint8 [N, 4, 84, 84]
        h = p = self.projection(self.encoder(x.float() / 255.0))
        for block in self.blocks:
            h = block(h, p)
        return self.head(h)


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
    yield is_atari(a.env_id), f"--env-id must be an envpool Atari id such as Breakout-v5, got {a.env_id!r}"
    yield from U.in_domain(a, ">= 1", "total_timesteps", "num_minibatches", "num_steps", "num_steps_min",
                           "num_steps_max", "gns_freq", "update_epochs", "epochs_ref_steps")
    yield from U.in_domain(a, "in [1, 2^31)", "num_envs", "eval_num_envs", "eval_max_episode_steps")
    yield (a.gns_micro_batches >= 2, "--gns-micro-batches must be >= 2 (tr(S) is a spread of micro-batch gradients), "
           f"got {a.gns_micro_batches!r}")
    yield from U.in_domain(a, ">= 0", "checkpoint_every", "log_every_seconds", "eval_episodes")
    yield from U.in_domain(a, "> 0", "learning_rate", "max_grad_norm")
    yield from U.in_domain(a, "in (0, 1]", "gamma")
    yield from U.in_domain(a, "in [0, 1]", "q_lambda", "start_e", "end_e", "exploration_fraction", "eval_epsilon")
    yield (a.num_steps_min <= a.num_steps_max,
           f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max ({a.num_steps_max})")
    yield (a.gns_start_steps == 0 or a.num_steps_min <= a.gns_start_steps <= a.num_steps_max,
           "--gns-start-steps must be 0 (L_min) or within [--num-steps-min, --num-steps-max] "
           f"= [{a.num_steps_min}, {a.num_steps_max}], got {a.gns_start_steps}")
    # Every L the run may use must split into equal minibatches (and micro-batches).
    yield (not a.adapt or a.num_envs % a.num_minibatches == 0, f"--num-envs ({a.num_envs}) must be divisible by "
           f"--num-minibatches ({a.num_minibatches}) so that every L in [L_min, L_max] splits evenly")
    yield (not a.adapt or a.num_envs % a.gns_micro_batches == 0, f"--num-envs ({a.num_envs}) must be divisible by "
           f"--gns-micro-batches ({a.gns_micro_batches}) so that every L in [L_min, L_max] splits evenly")
    yield (a.adapt or (a.num_envs * a.num_steps) % a.num_minibatches == 0, "the batch --num-envs x --num-steps "
           f"({a.num_envs * a.num_steps}) must be divisible by --num-minibatches ({a.num_minibatches})")
    L, flag = (a.num_steps_max, "--num-steps-max") if a.adapt else (a.num_steps, "--num-steps")  # the longest update
    yield U.epochs_problem(gns_update_epochs(L, a.update_epochs, a.epochs_ref_steps, a.gns_fixed_epochs),
                           f"--update-epochs {a.update_epochs}, --epochs-ref-steps {a.epochs_ref_steps} and {flag} {L}")
    obs_shape = envpool.make_spec(a.env_id).observation_space.shape  # (4, 84, 84): the stacked frames
    yield U.rollout_memory_problem(a, lambda L: Rollout.allocate(L, a.num_envs, obs_shape, "meta").nbytes)
    yield (not a.compile or U.has_cxx(),
           "--compile needs a C++ compiler on PATH (g++ or clang++, or $CXX) to build its kernels; none found")


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """The flags (with --resume, the checkpoint's for every flag not given); exit 2 with one line on bad input."""
    return U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, CHECKPOINT_STATE, argv)


@torch.no_grad()
def evaluate(q_network, args, seed, device, run_dir=None):
    """--eval-episodes whole games, epsilon-greedy (--eval-epsilon), by abs_utils.play_atari_games (--eval-protocol);
    --eval-fire-after-life-loss presses FIRE on the step after a lost life in games that have it (docs/pqn.md).
    With --capture-video, the first games go to <run_dir>/videos/ at 15 frames a second (60 Hz, frame skip 4)."""
    def act(obs):
        with autocast(device, args.bf16):
            q_values = q_network(torch.from_numpy(obs).to(device)).float()
        return select_actions(q_values, args.eval_epsilon)[0].cpu().numpy()

    episodes, protocol = args.eval_episodes, args.eval_protocol
    num_envs = args.eval_num_envs if protocol == "first-finished" else min(args.eval_num_envs, episodes)  # >= 1 game
    videos = U.videos_of(args, run_dir, fps=15)
    envs = make_envs(args.env_id, num_envs, seed, train=False, max_episode_steps=args.eval_max_episode_steps,
                     render_mode=videos and "rgb_array")
    fire = U.fire_action(args.env_id) if args.eval_fire_after_life_loss else None
    return U.play_atari_games(envs, act, episodes, fire, protocol, videos)


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "inference", "update", "adapt"))
    device = run.device

    envs = make_envs(args.env_id, args.num_envs, run.env_seed, train=True, num_threads=args.env_threads)
    q_network = QNetwork(envs.action_space.n, args.network).to(device)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate)
    # Acting and learning go through q_forward; checkpoints and the GNS estimate use the plain float32 module.
    q_forward = torch.compile(q_network) if args.compile else q_network
    E = args.num_envs
    # Fixed-batch mode (--no-adapt) is the same loop with L_min = L_max = --num-steps and no estimates.
    L_min, L_max = (args.num_steps_min, args.num_steps_max) if args.adapt else (args.num_steps, args.num_steps)
    scheduler = GNSScheduler(L_min, L_max, E, args.gns_start_steps if args.adapt and args.gns_start_steps else None)
    rollout = Rollout.allocate(L_max, E, envs.observation_space.shape, device)  # rollout.obs[t]: step t

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
    while global_step < run.stop_step:  # --total-timesteps, or --stop-at-step
        L = scheduler.num_steps
        epochs = gns_update_epochs(L, args.update_epochs, args.epochs_ref_steps, args.gns_fixed_epochs)
        learning_rate = learning_rate_at(args.learning_rate, global_step, args.total_timesteps, args.anneal_lr)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        measure = args.adapt and gns_estimates_in(iteration, args.gns_freq, args.gns_timing)
        for step in range(L):
            with run.timed("inference"):
                epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                          global_step)
                rollout.obs[step] = next_obs
                rollout.valid[step] = 1.0 - prev_end
                with torch.no_grad(), autocast(device, args.bf16):
                    q_values = q_forward(next_obs).float()
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
            # Episode statistics of whole games (not lives), unclipped, vectorised over the envs.
            ep_return += info["reward"]
            game_over = info["terminated"].astype(bool) | trunc
            if game_over.any():
                run.log_games(ep_return[game_over], info["elapsed_step"][game_over], global_step)
                recent_returns.extend(ep_return[game_over].tolist())
                ep_return[game_over] = 0.0

        with run.timed("update"):
            with torch.no_grad():
                with autocast(device, args.bf16):
                    last_value = q_forward(next_obs).float().max(dim=1).values
                next_values = torch.cat([rollout.values[1:L], last_value.unsqueeze(0)])
                returns = q_lambda_returns(rollout.rewards[:L], next_values, rollout.terminals[:L], rollout.ends[:L],
                                           args.gamma, args.q_lambda)
            b_obs = rollout.obs[:L].reshape((L * E,) + rollout.obs.shape[2:])
            try:
                batch = (b_obs, rollout.actions[:L].reshape(-1), returns.reshape(-1), rollout.valid[:L].reshape(-1))
                td_loss, mean_q, estimate, gns_seconds = learn_with_gns(q_network, optimizer, batch, epochs, args,
                                                                        q_forward, measure)
            except U.NonFiniteLoss as e:  # checkpoint_nonfinite.pt: the state before the failing step; exit 3
                run.fail(global_step, e, state)

        run.perf["update"] -= gns_seconds  # the estimate ran inside learn_with_gns; its time counts as adapt
        if estimate is not None:
            tr_S, G2, b_simple = estimate
            new_L = scheduler.update(tr_S, G2)
            run.perf["adapt"] += gns_seconds  # this estimate alone in adapt/gns_seconds; perf/adapt_seconds sums them
            run.log(global_step, {
                "adapt/gns": b_simple, "adapt/gns_noise": tr_S, "adapt/gns_signal": G2, "adapt/num_steps": new_L,
                "adapt/batch_size": new_L * E, "adapt/update_epochs": gns_update_epochs(
                    new_L, args.update_epochs, args.epochs_ref_steps, args.gns_fixed_epochs),
                "adapt/gns_seconds": gns_seconds, "adapt/gns_undefined": scheduler.num_undefined})
        iteration += 1

        sps = run.sps(global_step)
        run.log(global_step, {"charts/SPS": sps, "charts/epsilon": epsilon, "charts/learning_rate": learning_rate,
                              "losses/td_loss": td_loss, "losses/q_values": mean_q}, perf=True)
        gns_field = f" | B_simple {scheduler.b_simple:.0f}" if scheduler.num_estimates else ""  # once one exists
        run.progress(global_step, sps, f"L {scheduler.num_steps}{gns_field} | eps {epsilon:.3f}", recent_returns)
        run.checkpoint(global_step, L * E, state)  # and on SIGTERM/SIGINT: checkpoint, exit 128 + n
    envs.close()
    run.end_training()

    if args.save_model:
        run.save_model({"q_network": q_network.state_dict()})
    returns, lengths, capped, action_counts = [], [], 0, None
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes ({args.eval_protocol}, epsilon {args.eval_epsilon}, "
              f"cap {args.eval_max_episode_steps} steps)")
        returns, lengths, capped, action_counts = evaluate(q_forward, args, args.seed + 10_000, device, run.dir)
    run.finish(global_step, returns, lengths, capped, action_counts)
