"""PPO + Adaptive Batch Scaling (ABS) on gymnasium MuJoCo, one file in the style of CleanRL.

Paper: "Scalable On-Policy Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML 2026). ABS measures
Behavioral Divergence, here the analytic KL(pi_new || pi_old) between the diagonal Gaussian policies before and
after an update, and maps it on a log scale to the rollout length L: a settling policy gets a larger batch.
`--divergence ess` schedules on an alternative bounded in [0, 1] instead: 1 - ESS/n, from the effective sample size
of the ratios pi_new / pi_old at the actions the old policy took (docs/study-mujoco-ess.md).
`--no-adapt --num-steps 2048` is CleanRL's continuous PPO (ppo_continuous_action.py).

    python abs_ppo_mujoco.py --env-id HalfCheetah-v4 --seed 1     # --help lists every flag

Reading order: Args; the paper's method (the ABS schedule and the divergences, then PPO); this script's flag checks,
normalisation state and evaluation; the training loop at the bottom. The run machinery is in abs_utils/ (copy both).
"""
import abs_utils as U
U.catch_signals()  # first: SIGINT/SIGTERM during the slow imports below are one line, not a traceback

import copy
import dataclasses
import functools
import math
import os
import subprocess
import sys
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import mujoco
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.normal import Normal

SCRIPT = os.path.basename(__file__)[: -len(".py")]


@dataclass
class Args:
    exp_name: str = SCRIPT
    """the name of this experiment (part of the default run name)"""
    seed: int = 1
    """seed of the experiment (python, numpy, torch, gymnasium)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use the GPU when one is visible (falls back to the CPU otherwise)"""
    torch_threads: int = 1
    """CPU threads of torch (1 suits the 64-unit MLPs and shared machines; 0 keeps torch's default)"""
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
    checkpoint_every: int = 500_000
    """write <run>/checkpoint.pt every this many env steps (0: only at the end and on SIGTERM/SIGINT)"""
    stop_at_step: Optional[int] = None
    """stop training at this env step, a prefix of --total-timesteps (whose schedules it keeps); --resume goes on"""
    extend_schedules: bool = False
    """with --resume and another --total-timesteps: the schedules computed from it go on over the new total"""
    save_model: bool = False
    """write the final agent and its observation-normalisation statistics to <run>/model.pt"""
    log_every_seconds: float = 5.0
    """at most one progress line per this many seconds"""

    # PPO (CleanRL's ppo_continuous_action.py defaults)
    env_id: str = "HalfCheetah-v4"
    """a gymnasium MuJoCo id, e.g. HalfCheetah-v4 (the paper's version) or InvertedPendulum-v5"""
    total_timesteps: int = 5_000_000
    """total environment steps (summed over the envs)"""
    learning_rate: float = 3e-4
    """Adam learning rate (annealed linearly to 0 over --total-timesteps unless --no-anneal-lr)"""
    anneal_lr: bool = True
    """anneal the learning rate by the fraction of --total-timesteps done (iterations vary in length)"""
    num_envs: int = 1
    """number of parallel environments E (gymnasium SyncVectorEnv)"""
    num_minibatches: int = 32
    """minibatches per epoch (fixed; their size grows with L)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    norm_adv: bool = True
    """normalise the advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate (and value) clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss like the surrogate"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient-norm clip"""

    # ABS
    adapt: bool = True
    """adapt the rollout length with ABS (--no-adapt: fixed --num-steps)"""
    num_steps: int = 2048
    """rollout length L when --no-adapt"""
    num_steps_min: int = 1024
    """L_min, the shortest rollout ABS uses (and the length during burn-in)"""
    num_steps_max: int = 8192
    """L_max, the longest rollout ABS uses (storage is allocated at this length)"""
    adapt_freq: int = 10
    """K: measure the divergences every K iterations"""
    window: int = 10
    """W: the schedule uses the mean of the last W measurements"""
    burn_in: Optional[int] = None
    """measurements before L first moves from L_min (default: W; the authors' code: 10 with --window 20)"""
    ema_beta: float = 0.1
    """beta of the EMA that moves L towards its target"""
    divergence: Literal["kl", "ess"] = "kl"
    """the schedule's divergence: kl (the paper's mean KL, nats; --kl-*) | ess (1 - ESS/n of the ratios; --ess-*)"""
    kl_low: float = 0.01
    """delta_min of --divergence kl: a mean KL at or below this gives L_max"""
    kl_high: float = 0.1
    """delta_max of --divergence kl: a mean KL at or above this gives L_min"""
    ess_low: float = 0.02
    """delta_min of --divergence ess: a mean 1 - ESS/n at or below this gives L_max (2 x --kl-low: 1 - ESS/n ~ 2 KL)"""
    ess_high: float = 0.2
    """delta_max of --divergence ess: a mean 1 - ESS/n at or above this gives L_min (2 x --kl-high)"""
    ref_batch_size: int = 2048
    """M: rollout states (and their actions) on which the divergences are measured"""
    schedule: Literal["log", "linear"] = "log"
    """interpolation of L between the divergence bounds: log | linear"""
    update_epochs: int = 10
    """base epochs at the reference length"""
    epochs_ref_steps: int = 2048
    """reference length of the epoch rule: epochs = max(min, round(base * L / ref))"""
    min_update_epochs: int = 1
    """floor of the epoch rule (PPO: 1, so L=1024 gets 5 epochs)"""
    base_epochs_in_burn_in: bool = False
    """keep --update-epochs until L first leaves L_min, as the authors' code (default: the epoch rule throughout)"""
    track_divergence: bool = False
    """with --no-adapt, still measure and log both divergences every K iterations"""

    # Evaluation
    eval_episodes: int = 10
    """deterministic (mean action) evaluation episodes after training, observation statistics frozen"""
    capture_video: bool = False
    """record the evaluation's first games as MP4 files in <run>/videos/, as a person sees the game (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records: the first the evaluation counts"""


# --resume takes every flag from the checkpoint but these run-control ones, when given; CHECKPOINT_STATE: the
# script's part of a checkpoint (besides abs_utils.RUN_STATE), checked before a --resume uses it.
RUN_CONTROL_FLAGS = ("resume", "total_timesteps", "stop_at_step", "extend_schedules", "checkpoint_every", "save_model",
                     "log_every_seconds", "cuda", "torch_threads", "track", "wandb_project_name", "wandb_entity",
                     "eval_episodes", "capture_video", "video_episodes")
CHECKPOINT_STATE = {"agent": dict, "optimizer": dict, "scheduler": dict, "normalization": dict, "iteration": int}


# ================================================================ the paper's method: the ABS schedule (pure math)
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


def multiples_in(L_min: int, L_max: int, multiple: int) -> tuple[int, int]:
    """The smallest and largest multiple of `multiple` in [L_min, L_max] (lo > hi when there is none)."""
    return -(-L_min // multiple) * multiple, L_max // multiple * multiple


def update_epochs_for(L: int, base_epochs: int, ref_steps: int, min_epochs: int = 1, keep_base: bool = False) -> int:
    """Gradient-intensity compensation: updates per transition stay constant as L grows (PPO floor: 1 epoch).
    keep_base: the base epochs whatever L is (the authors' code before L first leaves L_min)."""
    return base_epochs if keep_base else max(min_epochs, round_half_up(base_epochs * L / ref_steps))


def measures_in(iteration: int, adapt_freq: int) -> bool:
    """The divergences are measured across iteration `iteration` (counted from 0): the K-th, 2K-th, ... iteration,
    as in the authors' code (which counts from 1), so that every scheduled measurement follows K - 1 updates."""
    return (iteration + 1) % adapt_freq == 0


class ABSScheduler:
    """Keeps the last W divergences and L as a float EMA state (rounded only when used)."""

    def __init__(self, L_min, L_max, window, beta, delta_min, delta_max, schedule="log", burn_in=None, multiple=1):
        self.L_min, self.L_max, self.window, self.beta = L_min, L_max, window, beta
        self.delta_min, self.delta_max, self.schedule = delta_min, delta_max, schedule
        self.multiple = multiple
        self.history, self.burn_in = deque(maxlen=window), window if burn_in is None else burn_in
        self.L = float(L_min)
        self.num_measurements = 0

    @property
    def delta_bar(self) -> float:
        return float(np.mean(self.history)) if self.history else float("nan")

    @property
    def num_steps(self) -> int:
        """L rounded half up to a multiple of `multiple` inside [L_min, L_max]; the script picks a multiple at which
        E x L transitions split into equal minibatches."""
        lo, hi = multiples_in(self.L_min, self.L_max, self.multiple)
        return min(max(self.multiple * round_half_up(self.L / self.multiple), lo), hi)

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


def gaussian_kl(mean_new, std_new, mean_old, std_old):
    """KL(N(mean_new, std_new^2) || N(mean_old, std_old^2)) of diagonal Gaussians, summed over the last dim."""
    return (torch.log(std_old / std_new) + (std_new.pow(2) + (mean_new - mean_old).pow(2)) / (2.0 * std_old.pow(2))
            - 0.5).sum(dim=-1)


@torch.no_grad()
def behavioral_divergence(agent_new: nn.Module, agent_old: nn.Module, states: torch.Tensor) -> float:
    """delta: the mean over the states of KL(pi_new || pi_old), the analytic KL of the Gaussian policies."""
    return gaussian_kl(*agent_new.policy(states), *agent_old.policy(states)).mean().item()


def gaussian_log_ratio(actions, mean_new, std_new, mean_old, std_old):
    """log pi_new(a|s) - log pi_old(a|s) of diagonal Gaussians, summed over the last dim, in float64 (the
    normalising constants cancel)."""
    a, m_new, s_new, m_old, s_old = (x.double() for x in (actions, mean_new, std_new, mean_old, std_old))
    return ((a - m_old).pow(2) / (2.0 * s_old.pow(2)) - (a - m_new).pow(2) / (2.0 * s_new.pow(2))
            + torch.log(s_old / s_new)).sum(dim=-1)


def ess_divergence(log_ratios) -> float:
    """delta_ESS = 1 - ESS/n of the importance weights w = exp(log_ratios), ESS/n = (sum w)^2 / (n sum w^2).

    0 when all weights are equal (the policy did not move, or every ratio was scaled alike), towards 1 - 1/n as one
    weight dominates. Computed from the log weights with logsumexp in float64, because the weights themselves
    overflow (float32 at log w ~ 88, their squares at ~ 44) long before their ratio ESS/n is in doubt."""
    log_w = torch.as_tensor(log_ratios, dtype=torch.float64).reshape(-1)
    log_ess_fraction = (2.0 * torch.logsumexp(log_w, 0) - torch.logsumexp(2.0 * log_w, 0)
                        - math.log(log_w.numel()))
    delta = -torch.expm1(log_ess_fraction).item()  # -expm1 keeps the digits of a small divergence
    if math.isnan(delta):  # a NaN log-ratio (or +inf next to +inf): undefined, never "did not move"
        return float("nan")
    # ESS/n <= 1 (Cauchy-Schwarz): the clamp only removes rounding.
    return min(max(0.0, delta), 1.0)  # 0.0 first: max(-0.0, 0.0) is -0.0


@torch.no_grad()
def policy_divergences(agent_new: nn.Module, agent_old: nn.Module, states: torch.Tensor,
                       actions: torch.Tensor) -> tuple[float, float]:
    """(mean KL, delta_ESS) from one forward pass of each policy on the M reference states. The KL is
    behavioral_divergence's; delta_ESS weighs the actions the old policy took at those states (the rollout's, since
    the snapshot acted during the measured rollout) by pi_new / pi_old."""
    new, old = agent_new.policy(states), agent_old.policy(states)
    kl = gaussian_kl(*new, *old).mean().item()
    return kl, ess_divergence(gaussian_log_ratio(actions, *new, *old))


# ================================================================ PPO: agent, GAE, update, environments
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """CleanRL's continuous agent: separate 64-64 tanh MLPs, state-independent log-std."""

    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                    nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x).squeeze(-1)

    def policy(self, x):
        """Mean and standard deviation of the diagonal Gaussian policy."""
        mean = self.actor_mean(x)
        return mean, self.actor_logstd.expand_as(mean).exp()

    def get_action_and_value(self, x, action=None):
        probs = Normal(*self.policy(x), validate_args=False)  # no per-call argument checks (a device sync on GPU)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1), self.get_value(x)


def gae(rewards, values, dones, last_value, gamma, gae_lambda):
    """Advantages over a [L, E] rollout, computed backwards. dones[t]: transition t ended its episode,
    terminated or truncated (as in CleanRL, a time-limit end does not bootstrap)."""
    advantages = torch.empty_like(rewards)
    running, next_value = torch.zeros_like(last_value), last_value
    for t in reversed(range(rewards.shape[0])):
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        advantages[t] = running = delta + gamma * gae_lambda * nonterminal * running
        next_value = values[t]
    return advantages


def learning_rate_at(learning_rate: float, global_step: int, total_timesteps: int, anneal: bool) -> float:
    """Constant, or with anneal linear to 0 in the fraction of environment steps done (iterations vary in length)."""
    return learning_rate * (1.0 - global_step / total_timesteps if anneal else 1.0)


@dataclass
class Rollout:
    """Rollout storage, allocated once at L_max (an iteration uses the first L rows)."""
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor

    @classmethod
    def allocate(cls, L_max, num_envs, obs_dim, act_dim, device):
        shapes = {"obs": (obs_dim,), "actions": (act_dim,), "logprobs": (), "rewards": (), "dones": (), "values": ()}
        return cls(**{name: torch.zeros((L_max, num_envs) + shape, device=device) for name, shape in shapes.items()})

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in vars(self).values())


def ppo_update(agent, optimizer, b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values, epochs, args):
    """CleanRL's clipped-surrogate epochs over --num-minibatches minibatches; returns the loss statistics."""
    batch = b_obs.shape[0]
    mb_size = batch // args.num_minibatches
    clipfracs = []
    for _ in range(epochs):
        perm = torch.randperm(batch, device=b_obs.device)
        for start in range(0, batch, mb_size):
            idx = perm[start : start + mb_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[idx], b_actions[idx])
            logratio = newlogprob - b_logprobs[idx]
            ratio = logratio.exp()
            with torch.no_grad():
                old_approx_kl = (-logratio).mean()
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())
            mb_adv = b_advantages[idx]
            if args.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio,
                                -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            if args.clip_vloss:
                v_clipped = b_values[idx] + torch.clamp(newvalue - b_values[idx], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_returns[idx]) ** 2, (v_clipped - b_returns[idx]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[idx]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            if not torch.isfinite(grad_norm):  # a non-finite loss or gradient: stop before the step
                raise U.NonFiniteLoss(f"non-finite PPO loss or gradient (loss {loss.item()}, "
                                      f"grad norm {grad_norm.item()})")
            optimizer.step()
    # Like CleanRL: the last minibatch's losses and KL estimates, the clip fraction over all minibatches.
    return {"value_loss": v_loss.item(), "policy_loss": pg_loss.item(), "entropy": entropy_loss.item(),
            "old_approx_kl": old_approx_kl.item(), "approx_kl": approx_kl.item(),
            "clipfrac": torch.stack(clipfracs).mean().item()}


def find_wrapper(env, cls):
    while not isinstance(env, cls):
        env = env.env
    return env


def make_env(env_id, gamma, train=True, render_mode=None):
    """CleanRL's wrapper stack; evaluation leaves out the reward normalisation (returns are raw). render_mode
    "rgb_array": env.render() gives MuJoCo's picture of the scene (--capture-video)."""
    env = gym.make(env_id, render_mode=render_mode)
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
    if train:
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
    return env


def make_envs(env_id, num_envs, gamma):
    """Same-step autoreset (CleanRL's semantics); all envs share one set of normalisation statistics."""
    envs = gym.vector.SyncVectorEnv([lambda: make_env(env_id, gamma) for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs_rms = find_wrapper(envs.envs[0], gym.wrappers.NormalizeObservation).obs_rms
    return_rms = find_wrapper(envs.envs[0], gym.wrappers.NormalizeReward).return_rms
    for env in envs.envs[1:]:
        find_wrapper(env, gym.wrappers.NormalizeObservation).obs_rms = obs_rms
        find_wrapper(env, gym.wrappers.NormalizeReward).return_rms = return_rms
    return envs


# The paper's -v4 tasks, run on purpose (docs/ppo.md), draw two notices that are no problem of a run: gymnasium's
# "out of date, consider upgrading to v5" warning, and MuJoCo's deprecation of their XML's 'settotalmass', which
# MuJoCo's default handler appends to MUJOCO_LOG.TXT in the current directory, a file outside the run. Both are
# left out; MuJoCo's other warnings go to stderr (a handler of its own keeps MuJoCo from writing that file).
warnings.filterwarnings("ignore", message=r".*The environment \S+-v4 is out of date", category=DeprecationWarning)


def mujoco_warning(text: str) -> None:
    if "'settotalmass' is deprecated" not in text:
        print(f"warning: MuJoCo: {text}", file=sys.stderr, flush=True)


mujoco.set_mju_user_warning(mujoco_warning)


# ================================================================ this script's flags, normalisation and evaluation
@functools.lru_cache
def mujoco_dims(env_id: str) -> Optional[tuple[int, int]]:
    """(observation size, action size) of a gymnasium MuJoCo env that can be made here, else None (v2 and v3 ids
    exist in gymnasium's registry but need mujoco-py)."""
    # Silently: MuJoCo's compiler warnings, if any, are printed later, when the run makes its envs.
    mujoco.set_mju_user_warning(lambda text: None)
    try:
        if not str(gym.spec(env_id).entry_point).startswith("gymnasium.envs.mujoco."):
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(env_id)
        env.close()
        return int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape))
    except Exception:
        return None
    finally:
        mujoco.set_mju_user_warning(mujoco_warning)


def flag_problems(a: Args):
    """(ok, message) rows after abs_utils.common_problems; one-flag rows first, so later rows may divide by them."""
    yield (mujoco_dims(a.env_id) is not None, "--env-id must be a gymnasium MuJoCo id that can be made here, such as "
           f"HalfCheetah-v4 (-v4 or -v5), got {a.env_id!r}")
    yield from U.in_domain(a, ">= 1", "total_timesteps", "num_envs", "num_minibatches", "num_steps", "num_steps_min",
                           "num_steps_max", "adapt_freq", "window", "ref_batch_size", "update_epochs",
                           "epochs_ref_steps", "min_update_epochs")
    yield a.burn_in is None or a.burn_in >= 1, f"--burn-in must be >= 1, got {a.burn_in!r}"
    yield from U.in_domain(a, ">= 0", "checkpoint_every", "log_every_seconds", "eval_episodes",
                           "ent_coef", "vf_coef")
    yield from U.in_domain(a, "> 0", "clip_coef", "max_grad_norm", "kl_low")
    yield from U.in_domain(a, "in (0, 1e37]", "learning_rate")
    yield from U.in_domain(a, "in (0, 1]", "gamma", "ema_beta", "ess_low", "ess_high")  # 1 - ESS/n lies in [0, 1]
    yield from U.in_domain(a, "in [0, 1]", "gae_lambda")
    yield (a.num_steps_min <= a.num_steps_max,
           f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max ({a.num_steps_max})")
    yield a.kl_low < a.kl_high, f"--kl-low and --kl-high must satisfy 0 < low < high, got {a.kl_low} and {a.kl_high}"
    yield (a.ess_low < a.ess_high, "--ess-low and --ess-high must satisfy 0 < low < high <= 1, "
           f"got {a.ess_low} and {a.ess_high}")
    lo, hi = multiples_in(a.num_steps_min, a.num_steps_max, a.num_minibatches)  # the L that ABS may round to
    yield (not a.adapt or lo <= hi, f"[--num-steps-min, --num-steps-max] = [{a.num_steps_min}, {a.num_steps_max}] "
           f"contains no multiple of --num-minibatches ({a.num_minibatches})")
    yield (a.adapt or (a.num_envs * a.num_steps) % a.num_minibatches == 0, "the batch --num-envs x --num-steps "
           f"({a.num_envs * a.num_steps}) must be divisible by --num-minibatches ({a.num_minibatches})")
    yield (a.num_envs * (lo if a.adapt else a.num_steps) >= 2 * a.num_minibatches,
           f"--num-minibatches ({a.num_minibatches}) leaves fewer than 2 transitions per minibatch")
    L, flag = (a.num_steps_max, "--num-steps-max") if a.adapt else (a.num_steps, "--num-steps")  # the longest update
    yield U.epochs_problem(max(update_epochs_for(L, a.update_epochs, a.epochs_ref_steps, a.min_update_epochs),
                               a.update_epochs if a.adapt and a.base_epochs_in_burn_in else 0),
                           f"--update-epochs {a.update_epochs}, --epochs-ref-steps {a.epochs_ref_steps}, "
                           f"--min-update-epochs {a.min_update_epochs} and {flag} {L}")
    yield U.rollout_memory_problem(a, lambda L: Rollout.allocate(L, a.num_envs, *mujoco_dims(a.env_id), "meta").nbytes)
    yield rendering_problem(a.env_id) if a.capture_video else (True, "")


# --capture-video's check: one render of the task in a child process, so that a missing OpenGL library cannot take
# this one down; MuJoCo picks its backend by MUJOCO_GL (docs/video.md: egl or osmesa where there is no display).
RENDER_PROBE = ("import sys, gymnasium as gym; env = gym.make(sys.argv[1], render_mode='rgb_array'); "
                "env.reset(seed=0); assert env.render().ndim == 3")


@functools.lru_cache
def rendering_problem(env_id: str) -> tuple[bool, str]:
    """(ok, message): MuJoCo can render env_id offscreen here, before anything is created or trained."""
    try:
        probe = subprocess.run([sys.executable, "-c", RENDER_PROBE, env_id], capture_output=True, text=True,
                               timeout=300)
        failed, why = probe.returncode != 0, (probe.stderr.strip().splitlines() or ["no output"])[-1]
    except (OSError, subprocess.SubprocessError) as e:
        failed, why = True, U.describe_error(e)
    gl = os.environ.get("MUJOCO_GL")
    return not failed, (f"--capture-video needs MuJoCo's offscreen rendering, which fails here with MUJOCO_GL="
                        f"{gl if gl is not None else '(unset)'} ({why[:200]}); without a display set MUJOCO_GL=egl "
                        "(apt install libegl1 libgl1-mesa-dri, or a GPU driver) or MUJOCO_GL=osmesa (apt install "
                        "libosmesa6): docs/video.md")


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """The flags (with --resume, the checkpoint's for every flag not given); exit 2 with one line on bad input."""
    return U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, CHECKPOINT_STATE, argv)


# Checkpoint state of the shared observation and reward normalisation: gymnasium keeps it in numpy arrays, which
# a weights_only load refuses, so it is stored as float64 tensors and converted back.
def rms_state(rms):
    """Tensors and a float (checkpoints load with weights_only=True)."""
    return {"mean": torch.tensor(np.asarray(rms.mean, dtype=np.float64)),
            "var": torch.tensor(np.asarray(rms.var, dtype=np.float64)), "count": float(rms.count)}


def set_rms_state(rms, state):
    mean, var = (torch.as_tensor(state[k], dtype=torch.float64).numpy().copy() for k in ("mean", "var"))
    if mean.shape != np.shape(rms.mean) or var.shape != np.shape(rms.var):  # another env's statistics
        raise ValueError(f"statistics of shape {list(mean.shape)}, this env's are {list(np.shape(rms.mean))}")
    rms.mean, rms.var = mean, var
    rms.count = float(state["count"])


def normalization_state(envs):
    """Observation and reward statistics plus each env's discounted-return accumulator."""
    reward_wrappers = [find_wrapper(env, gym.wrappers.NormalizeReward) for env in envs.envs]
    return {"obs_rms": rms_state(find_wrapper(envs.envs[0], gym.wrappers.NormalizeObservation).obs_rms),
            "return_rms": rms_state(reward_wrappers[0].return_rms),
            "discounted_reward": [torch.tensor(np.asarray(w.discounted_reward, dtype=np.float64))
                                  for w in reward_wrappers]}


def set_normalization_state(envs, state):
    set_rms_state(find_wrapper(envs.envs[0], gym.wrappers.NormalizeObservation).obs_rms, state["obs_rms"])
    set_rms_state(find_wrapper(envs.envs[0], gym.wrappers.NormalizeReward).return_rms, state["return_rms"])
    for env, acc in zip(envs.envs, state["discounted_reward"]):
        find_wrapper(env, gym.wrappers.NormalizeReward).discounted_reward = torch.as_tensor(acc).double().numpy().copy()


@torch.no_grad()
def evaluate(agent, env_id, episodes, obs_rms, seed, device, videos=None):
    """Deterministic (mean action) episodes with the training observation statistics frozen.
    The env's TimeLimit caps an episode (1000 steps for the MuJoCo tasks); capped = truncated episodes.
    videos (abs_utils.videos_of, --capture-video): the first episodes recorded, at the task's own frame rate."""
    env = make_env(env_id, gamma=1.0, train=False, render_mode=videos and "rgb_array")
    normalizer = find_wrapper(env, gym.wrappers.NormalizeObservation)
    set_rms_state(normalizer.obs_rms, obs_rms)
    normalizer.update_running_mean = False
    recorder = videos and U.Recorder(dataclasses.replace(videos, fps=env.metadata["render_fps"]), 1,
                                     lambda env_ids: [env.render()])  # rendering neither steps nor reseeds
    returns, lengths, capped = [], [], 0
    obs, _ = env.reset(seed=seed)
    for episode in range(episodes):
        ep_return, ep_length, term, trunc = 0.0, 0, False, False
        while not (term or trunc):
            if recorder:
                recorder.capture()
            mean, _ = agent.policy(torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0))
            obs, reward, term, trunc, _ = env.step(mean[0].cpu().numpy())
            ep_return, ep_length = ep_return + float(reward), ep_length + 1
        if recorder:
            recorder.capture()
            recorder.ended(0, episode, ep_return)
        returns.append(ep_return)
        lengths.append(ep_length)
        capped += int(trunc and not term)
        obs, _ = env.reset()
    env.close()
    return returns, lengths, capped


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "inference", "update", "adapt"))
    device = run.device

    envs = make_envs(args.env_id, args.num_envs, args.gamma)
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    agent = Agent(obs_dim, act_dim).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    snapshot = copy.deepcopy(agent)  # theta: the weights before the measured iteration
    E = args.num_envs
    # --no-adapt: L = --num-steps, the scheduler only records; ABS rounds L to a multiple of the minibatch count.
    L_min, L_max = (args.num_steps_min, args.num_steps_max) if args.adapt else (args.num_steps, args.num_steps)
    use_ess = args.divergence == "ess"
    delta_min, delta_max = (args.ess_low, args.ess_high) if use_ess else (args.kl_low, args.kl_high)
    scheduler = ABSScheduler(L_min, L_max, args.window, args.ema_beta, delta_min, delta_max, args.schedule,
                             args.burn_in, multiple=args.num_minibatches if args.adapt else 1)
    mean_tag, bar_name = ("adapt/divergence_ess_mean", "ess_bar") if use_ess else ("adapt/kl_mean", "kl_bar")
    rollout = Rollout.allocate(L_max, E, obs_dim, act_dim, device)  # rollout.obs[t]: step t
    storage_bytes = rollout.nbytes

    global_step, iteration, L_moved = 0, 0, False  # L_moved: L has left L_min (--base-epochs-in-burn-in)
    # The burn-in's L is L_min rounded up to a multiple of the minibatch count; a fixed-L run has no burn-in.
    L_first = multiples_in(L_min, L_max, scheduler.multiple)[0]
    keep_base = args.adapt and args.base_epochs_in_burn_in
    if checkpoint is not None:
        U.load_state(args.resume, checkpoint, "agent", agent.load_state_dict)
        U.load_state(args.resume, checkpoint, "optimizer", optimizer.load_state_dict)
        U.load_state(args.resume, checkpoint, "scheduler", scheduler.load_state_dict)
        U.load_state(args.resume, checkpoint, "normalization", functools.partial(set_normalization_state, envs))
        global_step, iteration = checkpoint["global_step"], checkpoint["iteration"]
        L_moved = checkpoint.get("L_moved", False)  # (absent before --base-epochs-in-burn-in existed: it was off)
        print(f"resumed {run.checkpoint_path} at global_step {global_step} (environments restart from a reset "
              f"seeded with {run.env_seed}; observation statistics from "
              f"{checkpoint['normalization']['obs_rms']['count']:.0f} observations)")
    run.begin(global_step)
    run.log(global_step, {"perf/storage_bytes": storage_bytes})
    print(f"run {run.dir} on {device}; rollout storage {storage_bytes / 2**20:.1f} MiB at L_max={L_max}")

    def state():  # what a checkpoint holds besides what the Run adds (RNGs, flags, timings)
        return {"agent": agent.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "normalization": normalization_state(envs), "global_step": global_step, "iteration": iteration,
                "L_moved": L_moved}

    # seed + global_step on a resume (abs_utils.env_seed): the first run's episodes are not replayed
    next_obs = torch.as_tensor(envs.reset(seed=run.env_seed)[0], dtype=torch.float32, device=device)
    recent_returns = deque(maxlen=20)
    measuring = args.adapt or args.track_divergence
    while global_step < run.stop_step:  # --total-timesteps, or --stop-at-step
        L = scheduler.num_steps
        L_moved = L_moved or L != L_first
        epochs = update_epochs_for(L, args.update_epochs, args.epochs_ref_steps, args.min_update_epochs,
                                   keep_base and not L_moved)
        measure = measuring and measures_in(iteration, args.adapt_freq)
        if measure:
            snapshot.load_state_dict(agent.state_dict())
        learning_rate = learning_rate_at(args.learning_rate, global_step, args.total_timesteps, args.anneal_lr)
        optimizer.param_groups[0]["lr"] = learning_rate
        for step in range(L):
            with run.timed("inference"):
                rollout.obs[step] = next_obs
                with torch.no_grad():
                    action, rollout.logprobs[step], _, rollout.values[step] = agent.get_action_and_value(next_obs)
                rollout.actions[step] = action
                action_np = action.cpu().numpy()
            with run.timed("env"):
                obs, reward, term, trunc, info = envs.step(action_np)
            next_obs = torch.as_tensor(obs, dtype=torch.float32, device=device)
            rollout.rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            rollout.dones[step] = torch.as_tensor(term | trunc, dtype=torch.float32, device=device)
            global_step += E
            if "final_info" in info:  # raw (unnormalised) episode statistics from RecordEpisodeStatistics
                ended, episode = info["final_info"]["_episode"], info["final_info"]["episode"]
                run.log_games(episode["r"][ended], episode["l"][ended], global_step)
                recent_returns.extend(episode["r"][ended].tolist())

        with run.timed("update"):
            with torch.no_grad():
                advantages = gae(rollout.rewards[:L], rollout.values[:L], rollout.dones[:L], agent.get_value(next_obs),
                                 args.gamma, args.gae_lambda)
                returns = advantages + rollout.values[:L]
            b_obs, b_actions = rollout.obs[:L].reshape(L * E, obs_dim), rollout.actions[:L].reshape(L * E, act_dim)
            b_values, b_returns = rollout.values[:L].reshape(-1), returns.reshape(-1)
            try:
                stats = ppo_update(agent, optimizer, b_obs, b_actions, rollout.logprobs[:L].reshape(-1),
                                   advantages.reshape(-1), b_returns, b_values, epochs, args)
            except U.NonFiniteLoss as e:  # checkpoint_nonfinite.pt: the state before the failing step; exit 3
                run.fail(global_step, e, state)
            var_y = b_returns.var(unbiased=False).item()
            explained_var = float("nan") if var_y == 0 else 1 - (b_returns - b_values).var(correction=0).item() / var_y

        if measure:
            with run.timed("adapt"):
                ref = torch.randperm(L * E, device=device)[: args.ref_batch_size]
                kl, ess = policy_divergences(agent, snapshot, b_obs[ref], b_actions[ref])
                if args.adapt:
                    scheduler.update(ess if use_ess else kl)
                else:  # fixed batch: the divergences are only logged (--track-divergence)
                    scheduler.record(ess if use_ess else kl)
            new_L = scheduler.num_steps
            run.log(global_step, {
                "adapt/kl": kl, "adapt/divergence_ess": ess, mean_tag: scheduler.delta_bar, "adapt/num_steps": new_L,
                "adapt/batch_size": new_L * E, "adapt/update_epochs": update_epochs_for(
                    new_L, args.update_epochs, args.epochs_ref_steps, args.min_update_epochs,
                    keep_base and not (L_moved or new_L != L_first))})
        iteration += 1

        sps = run.sps(global_step)
        run.log(global_step, {"charts/SPS": sps, "charts/learning_rate": learning_rate,
                              **{f"losses/{name}": value for name, value in stats.items()},
                              "losses/explained_variance": explained_var}, perf=True)
        window = f" | {bar_name} {scheduler.delta_bar:.4f}" if scheduler.history else ""  # once a measurement exists
        run.progress(global_step, sps, f"L {L}{window} | epochs {epochs}", recent_returns)
        run.checkpoint(global_step, L * E, state)  # and on SIGTERM/SIGINT: checkpoint, exit 128 + n
    obs_rms = normalization_state(envs)["obs_rms"]  # frozen for evaluation and saved with the model
    envs.close()
    run.end_training()

    if args.save_model:
        run.save_model({"agent": agent.state_dict(), "obs_rms": obs_rms})
    returns, lengths, capped = [], [], 0
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes (mean action, frozen observation statistics)")
        returns, lengths, capped = evaluate(agent, args.env_id, args.eval_episodes, obs_rms, args.seed + 10_000, device,
                                            U.videos_of(args, run.dir, fps=0))  # fps: the task's (evaluate)
    run.finish(global_step, returns, lengths, capped)
