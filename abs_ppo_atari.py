"""PPO + Adaptive Batch Scaling (ABS) on envpool Atari, one file in the style of CleanRL.

Paper: "Scalable On-Policy Reinforcement Learning via Adaptive Batch Scaling" (Park, ICML 2026). ABS measures how much
the policy changed across an update and maps it on a log scale to the rollout length L: a settling policy gets a
larger batch. The policy here is categorical, so two divergences are measured on the same states: the categorical
KL(pi_new || pi_old) (`--divergence kl`, the default) and the paper's delta, the fraction of states whose greedy action
(the policy's mode) changed (`--divergence greedy`). docs/ppo-atari.md gives the measurements behind the default and
its bounds. `--no-adapt` (L = 128) is CleanRL's PPO on Atari (ppo_atari_envpool.py); docs/adding-abs.md is the recipe
this script was written from.

    python abs_ppo_atari.py --env-id Breakout-v5 --seed 1     # --help lists every flag

Reading order: Args; the paper's method (the ABS schedule and the divergences, then PPO); this script's flag checks
and evaluation; the training loop at the bottom. The run machinery is in abs_utils/ (copy both).
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
from torch.distributions.categorical import Categorical

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
    """write the final agent's weights to <run>/model.pt"""
    log_every_seconds: float = 5.0
    """at most one progress line per this many seconds"""

    # PPO (CleanRL's ppo_atari_envpool.py defaults)
    env_id: str = "Breakout-v5"
    """an envpool Atari id, e.g. Breakout-v5"""
    total_timesteps: int = 10_000_000
    """total environment steps (summed over the envs)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate (annealed linearly to 0 over --total-timesteps unless --no-anneal-lr)"""
    anneal_lr: bool = True
    """anneal the learning rate by the fraction of --total-timesteps done (iterations vary in length)"""
    num_envs: int = 8
    """number of parallel envpool environments E"""
    num_minibatches: int = 4
    """minibatches per epoch (fixed; their size grows with L)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    norm_adv: bool = True
    """normalise the advantages per minibatch"""
    clip_coef: float = 0.1
    """surrogate (and value) clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss like the surrogate"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient-norm clip"""

    # ABS
    adapt: bool = True
    """adapt the rollout length with ABS (--no-adapt: fixed --num-steps)"""
    num_steps: int = 128
    """rollout length L when --no-adapt"""
    num_steps_min: int = 64
    """L_min, the shortest rollout ABS uses (and the length during burn-in)"""
    num_steps_max: int = 256
    """L_max, the longest rollout ABS uses (storage is allocated at this length)"""
    adapt_freq: int = 10
    """K: measure the divergences every K iterations"""
    window: int = 10
    """W: the schedule uses the mean of the last W measurements"""
    burn_in: Optional[int] = None
    """measurements before L first moves from L_min (default: W)"""
    ema_beta: float = 0.1
    """beta of the EMA that moves L towards its target"""
    divergence: Literal["kl", "greedy"] = "kl"
    """the schedule's divergence: kl (mean categorical KL, nats; --kl-*) | greedy (modes changed; --greedy-*)"""
    kl_low: float = 0.0002
    """delta_min of --divergence kl: a mean KL at or below this gives L_max (docs/ppo-atari.md: measured)"""
    kl_high: float = 0.002
    """delta_max of --divergence kl: a mean KL at or above this gives L_min (the early level at L = 128)"""
    greedy_low: float = 0.05
    """delta_min of --divergence greedy: a share of changed greedy actions at or below this gives L_max (paper)"""
    greedy_high: float = 0.95
    """delta_max of --divergence greedy: a share at or above this gives L_min (the paper's PQN bound)"""
    ref_batch_size: int = 2048
    """M: rollout states on which the divergences are measured (all of them when the rollout has fewer)"""
    schedule: Literal["log", "linear"] = "log"
    """interpolation of L between the divergence bounds: log | linear"""
    update_epochs: int = 4
    """base epochs at the reference length"""
    epochs_ref_steps: int = 128
    """reference length of the epoch rule: epochs = max(min, round(base * L / ref))"""
    min_update_epochs: int = 1
    """floor of the epoch rule"""
    track_divergence: bool = False
    """with --no-adapt, still measure and log both divergences every K iterations"""

    # Evaluation
    eval_episodes: int = 100
    """evaluation episodes (whole games, no life loss, no reward clipping) after training"""
    eval_greedy: bool = False
    """evaluate with the policy's mode (default: actions sampled from the policy, as in training)"""
    eval_num_envs: int = 20
    """parallel environments for the evaluation (each plays an equal share of the episodes)"""
    eval_max_episode_steps: int = 27_000
    """per-episode step cap of the evaluation (27k agent steps = the ALE's 108k frames)"""
    eval_fire_after_life_loss: bool = True
    """in games with FIRE, press it on the step after a lost life as training's resets do"""
    capture_video: bool = False
    """record the evaluation's first games as MP4 files in <run>/videos/, as a person sees the game (docs/video.md)"""
    video_episodes: int = 2
    """how many games --capture-video records: the first the evaluation counts"""


# --resume takes every flag from the checkpoint but these run-control ones, when given; CHECKPOINT_STATE: the
# script's part of a checkpoint (besides abs_utils.RUN_STATE), checked before a --resume uses it.
RUN_CONTROL_FLAGS = (
    "resume", "total_timesteps", "stop_at_step", "extend_schedules", "checkpoint_every", "save_model",
    "log_every_seconds", "cuda", "torch_threads", "env_threads", "track", "wandb_project_name", "wandb_entity",
    "eval_episodes", "eval_greedy", "eval_num_envs", "eval_max_episode_steps", "eval_fire_after_life_loss",
    "capture_video", "video_episodes",
)
CHECKPOINT_STATE = {"agent": dict, "optimizer": dict, "scheduler": dict, "iteration": int}


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


def length_multiple(num_envs: int, num_minibatches: int) -> int:
    """The smallest m such that every L that is a multiple of m splits E x L transitions into equal minibatches."""
    return num_minibatches // math.gcd(num_envs, num_minibatches)


def multiples_in(L_min: int, L_max: int, multiple: int) -> tuple[int, int]:
    """The smallest and largest multiple of `multiple` in [L_min, L_max] (lo > hi when there is none)."""
    return -(-L_min // multiple) * multiple, L_max // multiple * multiple


def update_epochs_for(L: int, base_epochs: int, ref_steps: int, min_epochs: int = 1) -> int:
    """Gradient-intensity compensation: updates per transition stay constant as L grows (4 epochs at L = 128)."""
    return max(min_epochs, round_half_up(base_epochs * L / ref_steps))


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


def categorical_kl(logits_new: torch.Tensor, logits_old: torch.Tensor) -> torch.Tensor:
    """KL(Cat(logits_new) || Cat(logits_old)) per row, from log-softmax (finite for any finite logits). Clamped at 0:
    for nearly equal policies float32 rounding gives about -1e-7 in a quarter of the rows; a KL is never negative."""
    log_new, log_old = F.log_softmax(logits_new, dim=-1), F.log_softmax(logits_old, dim=-1)
    return (log_new.exp() * (log_new - log_old)).sum(dim=-1).clamp_min(0.0)


@torch.no_grad()
def policy_divergences(agent_new: nn.Module, agent_old: nn.Module, states: torch.Tensor) -> tuple[float, float]:
    """(mean KL(pi_new || pi_old), share of states whose greedy action changed) from one float32 forward pass of each
    policy on the M reference states. The greedy action is the mode, argmax of the logits (ties: the first)."""
    new, old = agent_new.logits(states).float(), agent_old.logits(states).float()
    return categorical_kl(new, old).mean().item(), (new.argmax(dim=1) != old.argmax(dim=1)).float().mean().item()


# ================================================================ PPO: agent, rollout storage, GAE, update
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """CleanRL's Atari agent: the Nature CNN shared by a categorical policy head and a value head (layers built in
    CleanRL's order, so that one seed gives the same initial weights)."""

    def __init__(self, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(), layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x):  # x: uint8 [N, 4, 84, 84]
        return self.network(x.float() / 255.0)

    def get_value(self, x):
        return self.critic(self.hidden(x)).squeeze(-1)

    def logits(self, x):
        return self.actor(self.hidden(x))

    def get_action_and_value(self, x, action=None):
        hidden = self.hidden(x)
        probs = Categorical(logits=self.actor(hidden), validate_args=False)  # no per-call checks (a GPU sync)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).squeeze(-1)


@dataclass
class Rollout:
    """Rollout storage, allocated once at L_max (an iteration uses the first L rows); uint8 observations."""
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor

    @classmethod
    def allocate(cls, L_max, num_envs, obs_shape, device):
        def zeros(dtype=torch.float32, shape=()):
            return torch.zeros((L_max, num_envs) + tuple(shape), dtype=dtype, device=device)

        return cls(obs=zeros(torch.uint8, obs_shape), actions=zeros(torch.long), logprobs=zeros(), rewards=zeros(),
                   dones=zeros(), values=zeros())

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in vars(self).values())


def gae(rewards, values, dones, last_value, gamma, gae_lambda):
    """Advantages over a [L, E] rollout, computed backwards. dones[t]: transition t ended its episode (with
    --episodic-life training, a lost life), terminated or truncated; no bootstrap across it, as in CleanRL."""
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
    """(ok, message) rows after abs_utils.common_problems; one-flag rows first, so later rows may divide by them."""
    yield is_atari(a.env_id), f"--env-id must be an envpool Atari id such as Breakout-v5, got {a.env_id!r}"
    yield from U.in_domain(a, ">= 1", "total_timesteps", "num_minibatches", "num_steps", "num_steps_min",
                           "num_steps_max", "adapt_freq", "window", "ref_batch_size", "update_epochs",
                           "epochs_ref_steps", "min_update_epochs")
    yield from U.in_domain(a, "in [1, 2^31)", "num_envs", "eval_num_envs", "eval_max_episode_steps")
    yield a.burn_in is None or a.burn_in >= 1, f"--burn-in must be >= 1, got {a.burn_in!r}"
    yield from U.in_domain(a, ">= 0", "checkpoint_every", "log_every_seconds", "eval_episodes", "ent_coef", "vf_coef")
    yield from U.in_domain(a, "> 0", "clip_coef", "max_grad_norm", "kl_low")
    yield from U.in_domain(a, "in (0, 1e37]", "learning_rate")
    yield from U.in_domain(a, "in (0, 1]", "gamma", "ema_beta", "greedy_low", "greedy_high")  # a share of states
    yield from U.in_domain(a, "in [0, 1]", "gae_lambda")
    yield (a.num_steps_min <= a.num_steps_max,
           f"--num-steps-min ({a.num_steps_min}) must be <= --num-steps-max ({a.num_steps_max})")
    yield a.kl_low < a.kl_high, f"--kl-low and --kl-high must satisfy 0 < low < high, got {a.kl_low} and {a.kl_high}"
    yield (a.greedy_low < a.greedy_high, "--greedy-low and --greedy-high must satisfy 0 < low < high <= 1, "
           f"got {a.greedy_low} and {a.greedy_high}")
    multiple = length_multiple(a.num_envs, a.num_minibatches)
    lo, hi = multiples_in(a.num_steps_min, a.num_steps_max, multiple)  # the L that ABS may round to
    yield (not a.adapt or lo <= hi, f"[--num-steps-min, --num-steps-max] = [{a.num_steps_min}, {a.num_steps_max}] "
           f"holds no L for which --num-envs x L ({a.num_envs} x L) splits into --num-minibatches "
           f"({a.num_minibatches}) equal minibatches")
    yield (a.adapt or (a.num_envs * a.num_steps) % a.num_minibatches == 0, "the batch --num-envs x --num-steps "
           f"({a.num_envs * a.num_steps}) must be divisible by --num-minibatches ({a.num_minibatches})")
    yield (a.num_envs * (lo if a.adapt else a.num_steps) >= 2 * a.num_minibatches,
           f"--num-minibatches ({a.num_minibatches}) leaves fewer than 2 transitions per minibatch")
    L, flag = (a.num_steps_max, "--num-steps-max") if a.adapt else (a.num_steps, "--num-steps")  # the longest update
    yield U.epochs_problem(update_epochs_for(L, a.update_epochs, a.epochs_ref_steps, a.min_update_epochs),
                           f"--update-epochs {a.update_epochs}, --epochs-ref-steps {a.epochs_ref_steps}, "
                           f"--min-update-epochs {a.min_update_epochs} and {flag} {L}")
    obs_shape = envpool.make_spec(a.env_id).observation_space.shape  # (4, 84, 84): the stacked frames
    yield U.rollout_memory_problem(a, lambda L: Rollout.allocate(L, a.num_envs, obs_shape, "meta").nbytes)


def parse_args(argv=None) -> tuple[Args, Optional[dict]]:
    """The flags (with --resume, the checkpoint's for every flag not given); exit 2 with one line on bad input."""
    return U.parse_args(Args, SCRIPT, flag_problems, RUN_CONTROL_FLAGS, CHECKPOINT_STATE, argv)


@torch.no_grad()
def evaluate(agent, args, seed, device, run_dir=None):
    """--eval-episodes whole games by abs_utils.play_atari_games, with actions sampled from the policy (or its mode
    with --eval-greedy); --eval-fire-after-life-loss presses FIRE after a lost life in games that have it.
    With --capture-video, the first games go to <run_dir>/videos/ at 15 frames a second (60 Hz, frame skip 4)."""
    def act(obs):
        logits = agent.logits(torch.from_numpy(obs).to(device))
        sample = Categorical(logits=logits, validate_args=False).sample
        return (logits.argmax(dim=1) if args.eval_greedy else sample()).cpu().numpy()

    videos = U.videos_of(args, run_dir, fps=15)
    envs = make_envs(args.env_id, min(args.eval_num_envs, args.eval_episodes), seed, train=False,
                     max_episode_steps=args.eval_max_episode_steps, render_mode=videos and "rgb_array")
    fire = U.fire_action(args.env_id) if args.eval_fire_after_life_loss else None
    return U.play_atari_games(envs, act, args.eval_episodes, fire, videos=videos)


if __name__ == "__main__":
    args, checkpoint = parse_args()
    run = U.Run(args, checkpoint, SCRIPT, phases=("env", "inference", "update", "adapt"))
    device = run.device

    envs = make_envs(args.env_id, args.num_envs, run.env_seed, train=True, num_threads=args.env_threads)
    agent = Agent(envs.action_space.n).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    snapshot = copy.deepcopy(agent)  # theta: the weights before the measured iteration
    E = args.num_envs
    # --no-adapt: L = --num-steps, the scheduler only records; ABS rounds L so that E x L splits into minibatches.
    L_min, L_max = (args.num_steps_min, args.num_steps_max) if args.adapt else (args.num_steps, args.num_steps)
    use_kl = args.divergence == "kl"
    delta_min, delta_max = (args.kl_low, args.kl_high) if use_kl else (args.greedy_low, args.greedy_high)
    scheduler = ABSScheduler(L_min, L_max, args.window, args.ema_beta, delta_min, delta_max, args.schedule,
                             args.burn_in, multiple=length_multiple(E, args.num_minibatches) if args.adapt else 1)
    mean_tag, bar_name = ("adapt/kl_mean", "kl_bar") if use_kl else ("adapt/divergence_mean", "delta_bar")
    rollout = Rollout.allocate(L_max, E, envs.observation_space.shape, device)  # rollout.obs[t]: step t

    global_step, iteration = 0, 0
    if checkpoint is not None:
        U.load_state(args.resume, checkpoint, "agent", agent.load_state_dict)
        U.load_state(args.resume, checkpoint, "optimizer", optimizer.load_state_dict)
        U.load_state(args.resume, checkpoint, "scheduler", scheduler.load_state_dict)
        global_step, iteration = checkpoint["global_step"], checkpoint["iteration"]
        print(f"resumed {run.checkpoint_path} at global_step {global_step} (environments restart from a reset "
              f"seeded with {run.env_seed})")
    run.begin(global_step)
    run.log(global_step, {"perf/storage_bytes": rollout.nbytes})
    print(f"run {run.dir} on {device}; rollout storage {rollout.nbytes / 2**20:.1f} MiB at L_max={L_max}")

    def state():  # what a checkpoint holds besides what the Run adds (RNGs, flags, timings)
        return {"agent": agent.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "global_step": global_step, "iteration": iteration}

    next_obs = torch.from_numpy(envs.reset()[0]).to(device)
    ep_return, recent_returns = np.zeros(E), deque(maxlen=20)
    measuring = args.adapt or args.track_divergence
    while global_step < run.stop_step:  # --total-timesteps, or --stop-at-step
        L = scheduler.num_steps
        epochs = update_epochs_for(L, args.update_epochs, args.epochs_ref_steps, args.min_update_epochs)
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
            next_obs = torch.from_numpy(obs).to(device)
            rollout.rewards[step] = torch.from_numpy(reward).to(device)
            rollout.dones[step] = torch.from_numpy(term | trunc).to(device)
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
                advantages = gae(rollout.rewards[:L], rollout.values[:L], rollout.dones[:L], agent.get_value(next_obs),
                                 args.gamma, args.gae_lambda)
                returns = advantages + rollout.values[:L]
            b_obs = rollout.obs[:L].reshape((L * E,) + rollout.obs.shape[2:])
            b_values, b_returns = rollout.values[:L].reshape(-1), returns.reshape(-1)
            try:
                stats = ppo_update(agent, optimizer, b_obs, rollout.actions[:L].reshape(-1),
                                   rollout.logprobs[:L].reshape(-1), advantages.reshape(-1), b_returns, b_values,
                                   epochs, args)
            except U.NonFiniteLoss as e:  # checkpoint_nonfinite.pt: the state before the failing step; exit 3
                run.fail(global_step, e, state)
            var_y = b_returns.var(unbiased=False).item()
            explained_var = float("nan") if var_y == 0 else 1 - (b_returns - b_values).var(correction=0).item() / var_y

        if measure:
            with run.timed("adapt"):
                ref = torch.randperm(L * E, device=device)[: args.ref_batch_size]
                kl, greedy_change = policy_divergences(agent, snapshot, b_obs[ref])
                if args.adapt:
                    scheduler.update(kl if use_kl else greedy_change)
                else:  # fixed batch: the divergences are only logged (--track-divergence)
                    scheduler.record(kl if use_kl else greedy_change)
            new_L = scheduler.num_steps
            run.log(global_step, {
                "adapt/kl": kl, "adapt/divergence": greedy_change, mean_tag: scheduler.delta_bar,
                "adapt/num_steps": new_L, "adapt/batch_size": new_L * E, "adapt/update_epochs": update_epochs_for(
                    new_L, args.update_epochs, args.epochs_ref_steps, args.min_update_epochs)})
        iteration += 1

        sps = run.sps(global_step)
        run.log(global_step, {"charts/SPS": sps, "charts/learning_rate": learning_rate,
                              **{f"losses/{name}": value for name, value in stats.items()},
                              "losses/explained_variance": explained_var}, perf=True)
        window = f" | {bar_name} {scheduler.delta_bar:.4f}" if scheduler.history else ""  # once a measurement exists
        run.progress(global_step, sps, f"L {L}{window} | epochs {epochs}", recent_returns)
        run.checkpoint(global_step, L * E, state)  # and on SIGTERM/SIGINT: checkpoint, exit 128 + n
    envs.close()
    run.end_training()

    if args.save_model:
        run.save_model({"agent": agent.state_dict()})
    returns, lengths, capped, action_counts = [], [], 0, None
    if args.eval_episodes:
        print(f"evaluating {args.eval_episodes} episodes ({'mode' if args.eval_greedy else 'sampled'} actions, "
              f"cap {args.eval_max_episode_steps} steps)")
        returns, lengths, capped, action_counts = evaluate(agent, args, args.seed + 10_000, device, run.dir)
    run.finish(global_step, returns, lengths, capped, action_counts)
