"""PQN + the Gradient Noise Scale (GNS) batch schedule on envpool Atari, one file in the style of CleanRL.

The prior-art baseline of "Scalable (On-Policy) Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML
2026): abs_pqn_atari.py with only the batch-size controller replaced. GNS (McCandlish et al. 2018) estimates the
simple noise scale B_simple = tr(S) / |G|^2 from micro-batch gradients of the current batch and sets the rollout
length L = B_simple / E: a noisier gradient gets a larger batch. `--no-adapt --num-steps L` gives the fixed-batch
baselines (Small 16, Vanilla 32, Large 64).

    python gns_pqn_atari.py --env-id Breakout-v5 --seed 1     # --help lists every flag

Reading order: Args; the GNS schedule, then PQN; the run machinery (flag checks, checkpoints, evaluation,
files); the training loop at the bottom.
"""
import importlib
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple, Optional

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

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
    network: str = "pqn"
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
    gns_timing: str = "before"
    """before: estimate before iterations 0, K, 2K, ..; after: after the K-th, 2K-th, .. update (authors' code)"""
    gns_micro_batching: str = "shuffled"
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
    eval_num_envs: int = 20
    """parallel environments for the evaluation (each plays an equal share of the episodes)"""
    eval_max_episode_steps: int = 27_000
    """per-episode step cap of the evaluation (27k agent steps = the ALE's 108k frames)"""

    # Speed (same algorithm; see README "Speed flags")
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
GNS_TIMINGS = ("before", "after")
GNS_MICRO_BATCHINGS = ("shuffled", "contiguous")
# Flags that a --resume may change by giving them; every flag not given, and any other, comes from the checkpoint.
RUN_CONTROL_FLAGS = (
    "resume", "total_timesteps", "checkpoint_every", "save_model", "log_every_seconds", "cuda", "track",
    "wandb_project_name", "wandb_entity", "eval_episodes", "eval_epsilon", "eval_num_envs", "eval_max_episode_steps",
    "bf16", "compile",
)


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


def learn_with_gns(q_network, optimizer, obs, actions, returns, valid, epochs, num_minibatches, max_grad_norm,
                   forward, bf16, estimate, timing, num_micro_batches, micro_batching):
    """One iteration's pqn_update; with `estimate`, a GNS estimate on the same batch (returns and valid
    included) taken before the update (timing "before": at the weights that collected the batch and gave
    its targets) or after it (timing "after": at the weights just fitted to it, as the authors' code does).
    The micro-batch gradients always use the plain float32 module. Returns (td_loss, mean_q,
    (tr_S, G2, B_simple) or None, seconds spent on the estimate)."""
    def gns():
        t0 = time.perf_counter()
        order = micro_batch_order(obs.shape[0], micro_batching, obs.device)
        grads = micro_batch_gradients(q_network, obs, actions, returns, valid, num_micro_batches, order)
        return gns_estimate(grads, obs.shape[0]), time.perf_counter() - t0

    result, seconds = None, 0.0
    if estimate and timing == "before":
        result, seconds = gns()
    td_loss, mean_q = pqn_update(q_network, optimizer, obs, actions, returns, valid, epochs, num_minibatches,
                                 max_grad_norm, forward, bf16)
    if estimate and timing == "after":
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


def allocate_storage(L_max, num_envs, obs_shape, device):
    """Rollout storage, allocated once at L_max (an iteration uses the first L rows); uint8 observations."""
    def zeros(dtype=torch.float32, shape=()):
        return torch.zeros((L_max, num_envs) + tuple(shape), dtype=dtype, device=device)

    return {"obs": zeros(torch.uint8, obs_shape), "actions": zeros(torch.long), "rewards": zeros(),
            "values": zeros(), "terminals": zeros(), "ends": zeros(), "valid": zeros()}


class NonFiniteLoss(RuntimeError):
    pass


def pqn_update(q_network, optimizer, obs, actions, returns, valid, epochs, num_minibatches, max_grad_norm,
               forward=None, bf16=False):
    """Epochs of minibatch MSE between Q(s, a) and the Q(lambda) return; returns mean loss and mean Q.
    `forward` is q_network or its torch.compile wrapper (same weights)."""
    forward = q_network if forward is None else forward
    batch = obs.shape[0]
    mb_size = batch // num_minibatches
    losses, qs = [], []
    for _ in range(epochs):
        perm = torch.randperm(batch, device=obs.device)
        for start in range(0, batch, mb_size):
            idx = perm[start : start + mb_size]
            with autocast(obs.device, bf16):
                q_all = forward(obs[idx])
            q = q_all.float().gather(1, actions[idx].unsqueeze(1)).squeeze(1)
            w = valid[idx]  # drops envpool's reset transitions, whose action the env ignored
            loss = (w * (q - returns[idx]).pow(2)).sum() / w.sum().clamp(min=1.0)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), max_grad_norm)
            if not torch.isfinite(grad_norm):  # a non-finite loss or gradient: stop before the step
                raise NonFiniteLoss(f"non-finite TD loss or gradient (loss {loss.item()}, "
                                    f"grad norm {grad_norm.item()})")
            optimizer.step()
            losses.append(loss.detach())
            qs.append(q.detach().mean())
    return torch.stack(losses).mean().item(), torch.stack(qs).mean().item()


def make_envs(env_id, num_envs, seed, train, max_episode_steps=27_000):
    # Training uses life loss as episode end and clipped rewards; evaluation plays whole games unclipped.
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, episodic_life=train,
                        reward_clip=train, max_episode_steps=max_episode_steps)


# ================================================================ run machinery (not the algorithm)
# Flag checks, checkpoints and resume, signals, timing, evaluation records and file writing. Apart from each
# script's VALIDATION table, environment checks, checkpointed environment state and evaluate(), this section
# is the same text in the four scripts (a test compares them), so a fix in one is copied to all.
def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def rule(name: str, ok, domain: str):
    """A VALIDATION row for one flag: ok(value) must hold, else '--flag must be <domain>, got <value>'."""
    return (flag_of(name), lambda a: ok(getattr(a, name)),
            lambda a: f"{flag_of(name)} must be {domain}, got {getattr(a, name)!r}")


def at_least(lo, *names):
    return [rule(n, lambda v: v >= lo, f">= {lo}") for n in names]


def positive(*names):
    return [rule(n, lambda v: v > 0, "> 0") for n in names]


def probability(*names):
    return [rule(n, lambda v: 0 <= v <= 1, "in [0, 1]") for n in names]


def discount(*names):
    return [rule(n, lambda v: 0 < v <= 1, "in (0, 1]") for n in names]


def one_of(name: str, choices):
    return rule(name, lambda v: v in choices, f"one of {', '.join(choices)}")


def seed_rule(name: str = "seed"):
    # envpool takes signed 32-bit seeds, and evaluation runs on seed + 10_000
    return rule(name, lambda v: 0 <= v < 2**31 - 10_000, "in [0, 2^31 - 10000)")


def run_name_rule():
    return rule("run_name", lambda v: v is None or (v not in ("", ".", "..") and os.path.basename(v) == v),
                "a single path component (no '/', not '.' or '..')")


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except Exception:
        return False


def track_rule():
    return ("--track", lambda a: not a.track or importable("wandb"),
            lambda a: "--track needs the wandb package, which cannot be imported (pip install wandb)")


def is_atari(env_id: str) -> bool:
    try:
        return type(envpool.make_spec(env_id)).__name__ == "AtariEnvSpec"
    except Exception:
        return False


def has_cxx() -> bool:
    return any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++"))


# Every flag's domain, checked in this order before anything is created: (flag, ok(args), message(args)) rows.
# One-flag rows come first so that the rows relating several flags may divide by them.
VALIDATION = [
    seed_rule(), run_name_rule(), track_rule(), one_of("network", NETWORKS), one_of("gns_timing", GNS_TIMINGS),
    one_of("gns_micro_batching", GNS_MICRO_BATCHINGS),
    ("--env-id", lambda a: is_atari(a.env_id),
     lambda a: f"--env-id must be an envpool Atari id such as Breakout-v5, got {a.env_id!r}"),
    *at_least(1, "total_timesteps", "num_envs", "num_minibatches", "num_steps", "num_steps_min", "num_steps_max",
              "gns_freq", "update_epochs", "epochs_ref_steps", "eval_num_envs", "eval_max_episode_steps"),
    rule("gns_micro_batches", lambda v: v >= 2, ">= 2 (tr(S) is a spread of micro-batch gradients)"),
    *at_least(0, "checkpoint_every", "log_every_seconds", "eval_episodes"),
    *positive("learning_rate", "max_grad_norm"),
    *discount("gamma"),
    *probability("q_lambda", "start_e", "end_e", "exploration_fraction", "eval_epsilon"),
    ("--num-steps-min", lambda a: a.num_steps_min <= a.num_steps_max,
     lambda a: f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max ({a.num_steps_max})"),
    ("--gns-start-steps", lambda a: a.gns_start_steps == 0 or a.num_steps_min <= a.gns_start_steps <= a.num_steps_max,
     lambda a: f"--gns-start-steps must be 0 (L_min) or within [--num-steps-min, --num-steps-max] "
               f"= [{a.num_steps_min}, {a.num_steps_max}], got {a.gns_start_steps}"),
    # Every L the run may use must split into equal minibatches.
    ("--num-minibatches", lambda a: not a.adapt or a.num_envs % a.num_minibatches == 0,
     lambda a: f"--num-envs ({a.num_envs}) must be divisible by --num-minibatches ({a.num_minibatches}) "
               "so that every L in [L_min, L_max] splits evenly"),
    ("--gns-micro-batches", lambda a: not a.adapt or a.num_envs % a.gns_micro_batches == 0,
     lambda a: f"--num-envs ({a.num_envs}) must be divisible by --gns-micro-batches ({a.gns_micro_batches}) "
               "so that every L in [L_min, L_max] splits evenly"),
    ("--num-minibatches", lambda a: a.adapt or (a.num_envs * a.num_steps) % a.num_minibatches == 0,
     lambda a: f"the batch --num-envs x --num-steps ({a.num_envs * a.num_steps}) must be divisible by "
               f"--num-minibatches ({a.num_minibatches})"),
    ("--compile", lambda a: not a.compile or has_cxx(),
     lambda a: "--compile needs a C++ compiler on PATH (g++ or clang++, or $CXX) to build its kernels; none found"),
]


def validate_args(args: Args) -> None:
    """Raise ValueError with a one-line message naming the flag: NaN or infinity, then VALIDATION's rows in order."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{flag_of(name)} must be a finite number, got {value}")
    for _flag, ok, message in VALIDATION:
        if not ok(args):
            raise ValueError(message(args))


@torch.no_grad()
def evaluate(q_network, env_id, episodes, epsilon, num_envs, max_episode_steps, seed, device, bf16=False):
    """Play `episodes` whole games; each env plays a fixed quota so that short games are not favoured."""
    num_envs = min(num_envs, episodes)
    envs = make_envs(env_id, num_envs, seed, train=False, max_episode_steps=max_episode_steps)
    quota = np.full(num_envs, episodes // num_envs)
    quota[: episodes % num_envs] += 1
    finished = np.zeros(num_envs, dtype=np.int64)
    ep_return = np.zeros(num_envs)
    returns, lengths, capped = [], [], 0
    obs, _ = envs.reset()
    while (finished < quota).any():
        with autocast(device, bf16):
            q_values = q_network(torch.from_numpy(obs).to(device)).float()
        actions, _ = select_actions(q_values, epsilon)
        obs, reward, term, trunc, info = envs.step(actions.cpu().numpy())
        ep_return += reward
        ended = term | trunc
        counted = ended & (finished < quota)
        returns += ep_return[counted].tolist()
        lengths += info["elapsed_step"][counted].tolist()
        capped += int((counted & trunc & ~term).sum())
        finished += ended
        ep_return[ended] = 0.0
    envs.close()
    return returns, lengths, capped


def summarize_eval(returns, lengths, capped):
    r = np.asarray(returns, dtype=np.float64)
    stats = ({"mean": r.mean(), "std": r.std(), "median": np.median(r), "min": r.min(), "max": r.max()} if len(r)
             else dict.fromkeys(("mean", "std", "median", "min", "max")))
    return {"episodes": len(returns), "returns": [float(x) for x in returns], "lengths": [int(x) for x in lengths],
            **{k: None if v is None else float(v) for k, v in stats.items()}, "capped": int(capped)}


def log_finished_games(writer, returns, lengths, step: int) -> None:
    """One `charts/episodic_return` and `charts/episodic_length` event per finished game, at the global step where
    it ended (CleanRL's convention): several games may share a step, and every game weighs the same in a curve."""
    for episode_return, episode_length in zip(np.asarray(returns).tolist(), np.asarray(lengths).tolist()):
        writer.add_scalar("charts/episodic_return", episode_return, step)
        writer.add_scalar("charts/episodic_length", episode_length, step)


def atomic_write_json(path, obj):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def atomic_torch_save(path, obj):
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def rng_state(device):
    """Every RNG's state as tensors, lists and plain numbers (checkpoints load with weights_only=True)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(internal), gauss],
             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state, device):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def flags_given(argv) -> set:
    """The Args fields named on the command line: --flag-name, --flag-name=value, --no-flag-name (or underscores)."""
    names, given = {f.name for f in fields(Args)}, set()
    for token in argv:
        name = token[2:].split("=", 1)[0].replace("-", "_") if token.startswith("--") else ""
        if name not in names and name.startswith("no_"):
            name = name[3:]
        if name in names:
            given.add(name)
    return given


def load_checkpoint(path: str) -> dict:
    """torch.load(weights_only=True): tensors, numbers, strings, lists and dicts only; any other pickled object
    (which could run code while it is unpickled) is refused without being built."""
    if not os.path.isfile(path):
        raise ValueError(f"--resume: no checkpoint file at {path!r}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:
            unsafe = []
        if unsafe and all(g.startswith("numpy") for g in unsafe):  # numpy RNG state: before weights_only loading
            raise ValueError(f"--resume: refused {path!r}: written by an earlier version of this script, whose "
                             "numpy arrays cannot be loaded without unpickling; restart the run") from None
        if unsafe:
            raise ValueError(f"--resume: refused {path!r}: it holds pickled objects ({', '.join(unsafe[:3])}) that "
                             "could run code when loaded; only tensors and plain data are accepted") from None
        raise ValueError(f"--resume: {path!r} is not a checkpoint of this script ({type(e).__name__})") from None
    if not (isinstance(checkpoint, dict) and isinstance(checkpoint.get("args"), dict) and "run_name" in checkpoint):
        raise ValueError(f"--resume: {path!r} is not a checkpoint of this script (no args or run_name)")
    if checkpoint.get("algo", SCRIPT) != SCRIPT:  # (checkpoints written before "algo" was stored have none)
        raise ValueError(f"--resume: {path!r} is a checkpoint of {checkpoint['algo']}.py, not of {SCRIPT}.py")
    return checkpoint


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """Parse and validate the flags; exit 2 with one line on stderr on bad input, before anything is created.

    With --resume, a flag not on the command line comes from the checkpoint. A run-control flag that is given
    (RUN_CONTROL_FLAGS) overrides the checkpoint's; another flag that is given is ignored with a warning, since it
    would change the algorithm mid-run. A new run never reuses a run directory that holds a checkpoint or results."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(Args, args=argv)
    checkpoint = None
    try:
        if args.resume is not None:
            checkpoint = load_checkpoint(args.resume)
            cli, given = asdict(args), flags_given(argv)
            saved = {k: v for k, v in checkpoint["args"].items() if k in cli}
            ignored = [f"{flag_of(k)} {cli[k]} (checkpoint: {v})" for k, v in saved.items()
                       if k in given and k not in RUN_CONTROL_FLAGS and cli[k] != v]
            if ignored:
                print(f"warning: --resume keeps the checkpoint's algorithm flags; ignoring {', '.join(ignored)}",
                      file=sys.stderr)
            args = Args(**{**cli, **{k: v for k, v in saved.items() if k not in given or k not in RUN_CONTROL_FLAGS}})
            args.run_name = checkpoint["run_name"]
        validate_args(args)
        if checkpoint is None:
            args.run_name = args.run_name or f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
            run_dir = os.path.join(args.output_dir, args.run_name)
            for name in ("checkpoint.pt", "eval_results.json"):
                if os.path.exists(os.path.join(run_dir, name)):
                    raise ValueError(f"--run-name: {run_dir} already holds an earlier run's {name}; continue it with "
                                     f"--resume {os.path.join(run_dir, 'checkpoint.pt')} or choose another --run-name")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    return args, checkpoint


def start_run(args, checkpoint):
    """Create the run directory, seed every RNG, start wandb with --track; returns (run_dir, device)."""
    run_dir = (os.path.dirname(os.path.abspath(args.resume)) if checkpoint is not None
               else os.path.join(args.output_dir, args.run_name))
    os.makedirs(run_dir, exist_ok=True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.track:
        import wandb

        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                   config=vars(args), name=args.run_name, id=args.run_name, resume="allow", dir=run_dir)
    return run_dir, torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")


def open_writer(run_dir, args, checkpoint, global_step) -> SummaryWriter:
    """On resume, drop events logged after the checkpoint (the checkpoint's own step was logged before it); a new
    run in a directory left with only event files (stopped before its first checkpoint) hides their events."""
    writer = SummaryWriter(run_dir, purge_step=global_step + 1 if checkpoint is not None else 0)
    if checkpoint is None:
        writer.add_text("hyperparameters",
                        "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    return writer


def catch_stop_signals(unit: str) -> list:
    """SIGTERM/SIGINT put their number in the returned list; the loop checks it, checkpoints and exits at the end
    of the current `unit` of work, so that nothing is lost. A second signal stops at once."""
    stop_signal = []

    def on_signal(signum, frame):
        if stop_signal:
            raise KeyboardInterrupt
        stop_signal.append(signum)
        print(f"signal {signum}: checkpointing at the end of this {unit}", flush=True)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop_signal


def release_stop_signals():
    """After training (checkpointed), a signal during evaluation simply ends the process."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def timed(perf: dict, phase: str):
    """Add the block's wall-clock seconds to perf[phase] (the cumulative perf/<phase>_seconds tags). A block left
    by an exception adds nothing: a failing step is not part of the measured time."""
    start = time.perf_counter()
    yield
    perf[phase] += time.perf_counter() - start


def crossed(every: int, before: int, after: int) -> bool:
    """True when a multiple of `every` (0: never) lies in (before, after]: a checkpoint boundary was passed."""
    return every > 0 and after // every > before // every


def log_scalars(writer, step: int, scalars: dict, perf: Optional[dict] = None, device=None) -> None:
    """One event per tag; with perf, also every phase's cumulative seconds, and with a CUDA device its peak memory
    (logged with the phase sums each iteration, so that a run stopped by a signal reports them too)."""
    scalars = {**scalars, **{f"perf/{phase}_seconds": s for phase, s in (perf or {}).items()}}
    if device is not None and device.type == "cuda":
        scalars["perf/cuda_peak_bytes"] = torch.cuda.max_memory_allocated(device)
    for tag, value in scalars.items():
        writer.add_scalar(tag, value, step)


def progress_line(global_step: int, total_timesteps: int, sps: int, fields: str, recent_returns) -> str:
    eta = max(total_timesteps - global_step, 0) / max(sps, 1)
    ret = f"{np.mean(recent_returns):.1f}" if recent_returns else "n/a"
    return (f"step {global_step}/{total_timesteps} | SPS {sps} | {fields} | return {ret} "
            f"| ETA {int(eta // 3600)}:{time.strftime('%M:%S', time.gmtime(eta))}")


def checkpoint_state(args, device, **state) -> dict:
    """A checkpoint: the script's own state plus every RNG, the flags, the run name and the script's name."""
    return {**state, "rng": rng_state(device), "args": vars(args), "run_name": args.run_name, "algo": SCRIPT}


def save_and_exit(save_checkpoint, writer, path: str, code: int, message: str):
    """Write the checkpoint to `path`, say why (a signal's stop on stdout, an error on stderr), close the event
    file and exit with `code` (docs/CONVENTIONS.md: 128 + signal number, or 3 for a non-finite loss)."""
    save_checkpoint(path)
    print(message, file=sys.stdout if code >= 128 else sys.stderr, flush=True)
    writer.close()
    sys.exit(code)


def finish_run(run_dir, args, writer, global_step: int, train_seconds: float, summary: dict) -> None:
    """Log the evaluation and write eval_results.json, whose existence marks the run as finished."""
    if summary["episodes"]:
        writer.add_scalar("eval/mean_return", summary["mean"], global_step)
        print(f"eval: mean {summary['mean']:.2f} +- {summary['std']:.2f} over {summary['episodes']} episodes "
              f"({summary['capped']} hit the step cap)")
    atomic_write_json(os.path.join(run_dir, "eval_results.json"), {
        "algo": SCRIPT, "env_id": args.env_id, "seed": args.seed, "run_name": args.run_name,
        "global_step": global_step, "total_timesteps": args.total_timesteps, "train_seconds": train_seconds,
        "eval": summary, "args": vars(args)})
    writer.close()
    if args.track:
        import wandb

        wandb.finish()


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run_dir, device = start_run(args, checkpoint)
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    envs = make_envs(args.env_id, args.num_envs, args.seed, train=True)
    q_network = QNetwork(envs.action_space.n, args.network).to(device)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate)
    # Acting and learning go through q_forward; checkpoints and the GNS estimate use the plain float32 module.
    q_forward = torch.compile(q_network) if args.compile else q_network
    E = args.num_envs
    # Fixed-batch mode (--no-adapt) is the same loop with L_min = L_max = --num-steps and no estimates.
    L_min, L_max = (args.num_steps_min, args.num_steps_max) if args.adapt else (args.num_steps, args.num_steps)
    scheduler = GNSScheduler(L_min, L_max, E, args.gns_start_steps if args.adapt and args.gns_start_steps else None)
    buf = allocate_storage(L_max, E, envs.observation_space.shape, device)  # buf[name][t]: step t of the rollout
    storage_bytes = sum(b.numel() * b.element_size() for b in buf.values())

    global_step, iteration, train_seconds = 0, 0, 0.0
    # Cumulative seconds per phase (perf/* tags), carried across resumes like train_seconds.
    perf = {"env": 0.0, "inference": 0.0, "update": 0.0, "adapt": 0.0}
    if checkpoint is not None:
        q_network.load_state_dict(checkpoint["q_network"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        global_step, iteration, train_seconds = (
            checkpoint["global_step"], checkpoint["iteration"], checkpoint["train_seconds"])
        perf.update(checkpoint.get("perf", {}))
        set_rng_state(checkpoint["rng"], device)
        print(f"resumed {checkpoint_path} at global_step {global_step} (environments restart from a reset)")
    writer = open_writer(run_dir, args, checkpoint, global_step)
    writer.add_scalar("perf/storage_bytes", storage_bytes, global_step)
    print(f"run {run_dir} on {device}; rollout storage {storage_bytes / 2**20:.1f} MiB at L_max={L_max}")

    def save_checkpoint(path=checkpoint_path):
        atomic_torch_save(path, checkpoint_state(
            args, device, q_network=q_network.state_dict(), optimizer=optimizer.state_dict(),
            scheduler=scheduler.state_dict(), global_step=global_step, iteration=iteration,
            train_seconds=train_seconds, perf=dict(perf)))

    stop_signal = catch_stop_signals("iteration")
    next_obs = torch.from_numpy(envs.reset()[0]).to(device)
    prev_end = torch.zeros(E, device=device)  # the previous transition ended an episode
    ep_return, recent_returns = np.zeros(E), deque(maxlen=20)
    start_time, start_step, last_print = time.time(), global_step, 0.0
    while global_step < args.total_timesteps:
        L = scheduler.num_steps
        epochs = gns_update_epochs(L, args.update_epochs, args.epochs_ref_steps, args.gns_fixed_epochs)
        learning_rate = learning_rate_at(args.learning_rate, global_step, args.total_timesteps, args.anneal_lr)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        measure = args.adapt and gns_estimates_in(iteration, args.gns_freq, args.gns_timing)
        for step in range(L):
            with timed(perf, "inference"):
                epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                          global_step)
                buf["obs"][step] = next_obs
                buf["valid"][step] = 1.0 - prev_end
                with torch.no_grad(), autocast(device, args.bf16):
                    q_values = q_forward(next_obs).float()
                action, buf["values"][step] = select_actions(q_values, epsilon)
                buf["actions"][step] = action
                action_np = action.cpu().numpy()
            with timed(perf, "env"):
                obs, reward, term, trunc, info = envs.step(action_np)
            next_obs = torch.from_numpy(obs).to(device)
            buf["rewards"][step] = torch.from_numpy(reward).to(device)
            buf["terminals"][step] = torch.from_numpy(term).to(device)
            buf["ends"][step] = torch.from_numpy(term | trunc).to(device)
            prev_end = buf["ends"][step].clone()
            global_step += E
            # Episode statistics of whole games (not lives), unclipped, vectorised over the envs.
            ep_return += info["reward"]
            game_over = info["terminated"].astype(bool) | trunc
            if game_over.any():
                log_finished_games(writer, ep_return[game_over], info["elapsed_step"][game_over], global_step)
                recent_returns.extend(ep_return[game_over].tolist())
                ep_return[game_over] = 0.0

        with timed(perf, "update"):
            with torch.no_grad():
                with autocast(device, args.bf16):
                    last_value = q_forward(next_obs).float().max(dim=1).values
                next_values = torch.cat([buf["values"][1:L], last_value.unsqueeze(0)])
                returns = q_lambda_returns(buf["rewards"][:L], next_values, buf["terminals"][:L], buf["ends"][:L],
                                           args.gamma, args.q_lambda)
            b_obs = buf["obs"][:L].reshape((L * E,) + buf["obs"].shape[2:])
            try:
                td_loss, mean_q, estimate, gns_seconds = learn_with_gns(
                    q_network, optimizer, b_obs, buf["actions"][:L].reshape(-1), returns.reshape(-1),
                    buf["valid"][:L].reshape(-1), epochs, args.num_minibatches, args.max_grad_norm, q_forward,
                    args.bf16, measure, args.gns_timing, args.gns_micro_batches, args.gns_micro_batching)
            except NonFiniteLoss as e:
                train_seconds += time.time() - start_time  # up to now, like the perf sums
                failed_path = os.path.join(run_dir, "checkpoint_nonfinite.pt")  # checkpoint.pt stays the last good
                save_and_exit(save_checkpoint, writer, failed_path, 3,
                              f"error: {e} at global_step {global_step}; state before that step saved to "
                              f"{failed_path}. Start again with a lower --learning-rate.")

        perf["update"] -= gns_seconds  # the estimate ran inside learn_with_gns; its time counts as adapt
        if estimate is not None:
            tr_S, G2, b_simple = estimate
            new_L = scheduler.update(tr_S, G2)
            perf["adapt"] += gns_seconds  # this estimate alone in adapt/gns_seconds; perf/adapt_seconds sums them
            log_scalars(writer, global_step, {
                "adapt/gns": b_simple, "adapt/gns_noise": tr_S, "adapt/gns_signal": G2, "adapt/num_steps": new_L,
                "adapt/batch_size": new_L * E, "adapt/update_epochs": gns_update_epochs(
                    new_L, args.update_epochs, args.epochs_ref_steps, args.gns_fixed_epochs),
                "adapt/gns_seconds": gns_seconds, "adapt/gns_undefined": scheduler.num_undefined})
        iteration += 1

        now = time.time()
        sps = int((global_step - start_step) / max(now - start_time, 1e-9))
        log_scalars(writer, global_step, {
            "charts/SPS": sps, "charts/epsilon": epsilon, "charts/learning_rate": learning_rate,
            "losses/td_loss": td_loss, "losses/q_values": mean_q}, perf, device)
        if now - last_print >= args.log_every_seconds or global_step >= args.total_timesteps:
            last_print = now
            print(progress_line(global_step, args.total_timesteps, sps, f"L {scheduler.num_steps} | B_simple "
                                f"{scheduler.b_simple:.0f} | eps {epsilon:.3f}", recent_returns), flush=True)

        if stop_signal:
            train_seconds += now - start_time
            save_and_exit(save_checkpoint, writer, checkpoint_path, 128 + stop_signal[0],
                          f"stopped by signal {stop_signal[0]} at global_step {global_step}; "
                          f"resume with --resume {checkpoint_path}")
        if crossed(args.checkpoint_every, global_step - L * E, global_step) or global_step >= args.total_timesteps:
            train_seconds, start_time, start_step = train_seconds + now - start_time, now, global_step
            writer.flush()  # the events up to the checkpoint survive a hard kill (a resume purges the later ones)
            save_checkpoint()
    envs.close()
    train_seconds += time.time() - start_time

    release_stop_signals()
    if args.save_model:
        atomic_torch_save(os.path.join(run_dir, "model.pt"), {"q_network": q_network.state_dict(), "args": vars(args)})
    returns, lengths, capped = ([], [], 0)
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes (epsilon {args.eval_epsilon}, "
              f"cap {args.eval_max_episode_steps} steps)")
        returns, lengths, capped = evaluate(q_forward, args.env_id, args.eval_episodes, args.eval_epsilon,
                                            args.eval_num_envs, args.eval_max_episode_steps, args.seed + 10_000, device,
                                            args.bf16)
    finish_run(run_dir, args, writer, global_step, train_seconds, summarize_eval(returns, lengths, capped))
