"""docs/adding-abs.md, run: each of the page's three paths, its code blocks assembled into a loop of the CleanRL file it
edits, trains on a real environment with L (or the sampled batch) moving, and the schedule it gives is compared with
the script's own functions, iteration by iteration (gradient step by gradient step):

- PPO (`ppo_continuous_action.py`): a small Gaussian policy on Hopper-v5, 2 envs, L in [8, 32], against
  abs_ppo_mujoco.py, and over random configurations;
- PQN (`pqn_atari_envpool.py`): a small Q-network on Breakout-v5 (envpool), 4 envs, L in [4, 16], against
  abs_pqn_atari.py's ABSScheduler, update_epochs_for and q_lambda_returns;
- replay (`dqn_atari.py`): a small Q-network on Breakout-v5 with a replay buffer, the batch in [32, 128], against
  abs_btr.py's ABSScheduler, batch_size_of, measurement_offset and measurement_starts.

The page's "Check your loop" section says what CleanRL's own files need on this project's versions (envpool 1.x for
pqn_atari_envpool.py, gymnasium 1.x for dqn_atari.py, with the dqn-episodes block); the tests at the end check those
statements against the pinned packages, and bench/recipe-cleanrl/README.md, the record of following the page on
CleanRL's real files, against the scripts' schedules.

The page marks each block with `<!-- recipe: NAME -->`; a line `...  # CleanRL: what, unchanged` in a block stands for
CleanRL's own lines, which this file supplies (SLOTS: written here, not copied, and doing what CleanRL's do). A block
renamed, removed or broken on the page fails these tests.
"""
import ast
import contextlib
import copy
import dataclasses
import importlib.util
import math
import random
import re
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-abs.md"
sys.path.insert(0, str(ROOT))  # the script imports abs_utils beside it


def script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ppo, pqn, btr = script("abs_ppo_mujoco"), script("abs_pqn_atari"), script("abs_btr")

BLOCK = re.compile(r"<!-- recipe: ([a-z-]+) -->\n```python\n(.*?)\n```", re.S)
PPO_ORDER = ["imports", "flags", "agent", "divergence", "setup", "loop-top", "rollout", "update", "measure"]
PQN_ORDER = ["pqn-flags", "pqn-defaults", "pqn-divergence", "pqn-storage", "pqn-rollout", "pqn-update", "pqn-measure"]
REPLAY_ORDER = ["replay-flags", "replay-divergence", "replay-setup", "replay-loop"]
ORDER = ["schedule", *PPO_ORDER, *PQN_ORDER, *REPLAY_ORDER, "dqn-episodes"]
SLOT = re.compile(r"^( *)\.\.\.  # CleanRL: ([^,(]+?)(?:,| \(|$).*$", re.M)

# CleanRL's unchanged lines at each `...` of the page, with what the test records (trace.*) added.
SLOTS = {
    "start the game": """
        global_step = 0
        next_obs, _ = envs.reset(seed=args.seed)
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
        next_done = torch.zeros(args.num_envs, device=device)
        """,
    "one env step": """
        global_step += args.num_envs
        obs[step] = next_obs
        dones[step] = next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
        rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device).view(-1)
        next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
        trace.step(obs[step], actions[step], logprobs[step], values[step], rewards[step], next_done)
        trace.bootstrap(agent, next_obs)
        """,
    "one minibatch's losses and optimizer step": """
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
        ratio = (newlogprob - b_logprobs[mb_inds]).exp()
        mb_advantages = b_advantages[mb_inds]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        clipped = torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = torch.max(-mb_advantages * ratio, -mb_advantages * clipped).mean()
        v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb_inds]) ** 2).mean()
        loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
        """,
    "the iteration's logging": """
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        trace.iteration(global_step, optimizer, agent, next_obs, next_done, scheduler,
                        b_obs, b_actions, b_logprobs, b_values, b_advantages, b_returns)
        """,
}

HARNESS = '''
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.normal import Normal

{imports}


{schedule}


@dataclass
class Args:  # CleanRL's flags that the loop reads (its defaults), then the page's
    seed: int = 1
    env_id: str = "Hopper-v5"
    total_timesteps: int = 1000000
    learning_rate: float = 3e-4
    num_envs: int = 1
    num_steps: int = 2048
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 32
    update_epochs: int = 10
    norm_adv: bool = True
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
{flags}


class Agent(nn.Module):  # CleanRL's shape (separate actor and critic, state-independent log-std), 16 units
    def __init__(self, envs):
        super().__init__()
        obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
        self.critic = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor_mean = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, act_dim))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        probs = Normal(action_mean, self.actor_logstd.expand_as(action_mean).exp())
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)

{agent}


{divergence}


def train(args, envs, writer, trace, device=torch.device("cpu")):
    agent = Agent(envs).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
{loop}
    return agent, snapshot, scheduler, global_step
'''


def page_blocks() -> dict:
    found = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert [name for name, _ in found] == ORDER, [name for name, _ in found]
    return dict(found)


def fill_slots(code: str, slots=None) -> str:
    """The block with each `...  # CleanRL: what` line replaced by slots[what] (SLOTS: the PPO path's), at its
    indentation."""
    slots = SLOTS if slots is None else slots

    def replace(m):
        assert m.group(2) in slots, f"adding-abs.md: no stand-in for CleanRL's {m.group(2)!r}"
        return textwrap.indent(textwrap.dedent(slots[m.group(2)]).strip("\n"), m.group(1))
    return SLOT.sub(replace, code)


def assemble() -> str:
    b = page_blocks()
    loop = "\n".join(fill_slots(b[name]) for name in ("setup", "loop-top", "rollout", "update", "measure"))
    return HARNESS.format(imports=b["imports"], schedule=b["schedule"], flags=b["flags"], agent=b["agent"],
                          divergence=b["divergence"], loop=textwrap.indent(loop, "    "))


def recipe_module() -> dict:
    namespace = {"__name__": "recipe"}
    exec(compile(assemble(), "docs/adding-abs.md (assembled by tests/test_recipe.py)", "exec"), namespace)
    return namespace


class Trace:
    """What each iteration of the assembled loop did, read from the data it handled, not from the page's names: the
    rows it collected, the advantages against abs_ppo_mujoco.gae, the learning rate, the gradient steps (Adam's
    count), and every measurement the scheduler received."""

    def __init__(self, args):
        self.args, self.rows, self.iterations, self.kls = args, [], [], []

    def step(self, *row):
        self.rows.append([x.clone() for x in row])

    @torch.no_grad()
    def bootstrap(self, agent, next_obs):  # the value after the latest step, by the policy that collected it
        self.last_value = agent.get_value(next_obs).reshape(-1)

    def iteration(self, global_step, optimizer, agent, next_obs, next_done, scheduler, b_obs, b_actions, b_logprobs,
                  b_values, b_advantages, b_returns):
        L, E = len(self.rows), self.args.num_envs
        obs, actions, logprobs, values, rewards, ended = (torch.stack(x) for x in zip(*self.rows))
        # the batch is this rollout's rows, every buffer of it (no stale row from a longer iteration)
        for batch, rows in ((b_obs, obs), (b_actions, actions), (b_logprobs, logprobs), (b_values, values)):
            assert torch.equal(batch, rows.reshape(batch.shape)), "a batch holds rows this iteration did not collect"
        # GAE over these L rows, bootstrapped with the value after the last one
        expected = ppo.gae(rewards, values, ended, self.last_value, self.args.gamma, self.args.gae_lambda)
        torch.testing.assert_close(b_advantages, expected.reshape(-1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b_returns, (expected + values).reshape(-1), rtol=1e-5, atol=1e-6)
        adam_steps = int(optimizer.state[next(agent.parameters())]["step"])
        done_before = sum(it["gradient_steps"] for it in self.iterations)
        self.iterations.append({"L": L, "start": global_step - L * E, "lr": optimizer.param_groups[0]["lr"],
                                "gradient_steps": adam_steps - done_before,
                                "measured": scheduler.num_measurements > len(self.kls)})
        if self.iterations[-1]["measured"]:
            self.kls.append(scheduler.history[-1])
        self.rows = []


def run_recipe(tmp_path, **overrides):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    recipe = recipe_module()
    args = recipe["Args"](**overrides)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(args.env_id) for _ in range(args.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    writer, trace = SummaryWriter(str(tmp_path)), Trace(args)
    agent, snapshot, scheduler, global_step = recipe["train"](args, envs, writer, trace)
    writer.close()
    envs.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    events = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return args, trace, events, global_step, recipe


# Hopper-v5 (3 action dimensions), L in [8, 32] in multiples of 4, K = 3, W = burn-in = 2, a fast EMA, and bounds
# that this policy's KL falls between, so that L moves within a few hundred steps.
TINY = dict(env_id="Hopper-v5", num_envs=2, total_timesteps=600, num_steps_min=8, num_steps_max=32, num_minibatches=4,
            adapt_freq=3, window=2, ema_beta=0.5, kl_low=1e-6, kl_high=1e-2, ref_batch_size=24, update_epochs=2,
            epochs_ref_steps=16)


@pytest.fixture(scope="module")
def abs_run(tmp_path_factory):
    return run_recipe(tmp_path_factory.mktemp("recipe"), **TINY)


def test_the_assembled_loop_measures_first_at_the_kth_iteration_and_l_moves(abs_run):
    args, trace, events, global_step, _ = abs_run
    its = trace.iterations
    K, E = args.adapt_freq, args.num_envs
    assert [i for i, it in enumerate(its) if it["measured"]] == [i for i in range(len(its)) if (i + 1) % K == 0]
    first = [step for step, _ in events["adapt/kl"]][0]
    assert first == sum(it["L"] for it in its[:K]) * E == K * 8 * E  # after the K-th iteration, at L_min
    assert len({it["L"] for it in its}) >= 3, [it["L"] for it in its]  # L moved, and more than once
    assert args.total_timesteps <= global_step < args.total_timesteps + E * args.num_steps_max  # steps, not iterations
    assert [it["start"] for it in its] == [sum(x["L"] for x in its[:i]) * E for i in range(len(its))]


def test_the_assembled_loop_follows_the_scripts_schedule_iteration_by_iteration(abs_run):
    """L, the epochs (counted as Adam's steps) and the learning rate of every iteration are what abs_ppo_mujoco.py's
    own ABSScheduler, update_epochs_for and learning_rate_at give for the same measurements."""
    args, trace, events, _, _ = abs_run
    script = ppo.ABSScheduler(args.num_steps_min, args.num_steps_max, args.window, args.ema_beta, args.kl_low,
                              args.kl_high, "log", args.burn_in, multiple=args.num_minibatches)
    kls = iter(trace.kls)
    for i, it in enumerate(trace.iterations):
        epochs = ppo.update_epochs_for(script.num_steps, args.update_epochs, args.epochs_ref_steps,
                                       args.min_update_epochs)
        assert it["L"] == script.num_steps, i
        assert it["gradient_steps"] == epochs * args.num_minibatches, i
        assert it["lr"] == pytest.approx(ppo.learning_rate_at(args.learning_rate, it["start"], args.total_timesteps,
                                                              True), rel=1e-12, abs=0), i
        if ppo.measures_in(i, args.adapt_freq):
            script.update(next(kls))
    assert next(kls, None) is None
    # what the page logs at each measurement: the KL it measured, and the L and epochs of the next iteration
    measured = [i for i, it in enumerate(trace.iterations) if it["measured"]]
    assert [v for _, v in events["adapt/kl"]] == pytest.approx(trace.kls, rel=1e-6)
    logged_L = [int(v) for _, v in events["adapt/num_steps"]]
    assert len(logged_L) == len(measured)
    assert [logged_L[j] for j, i in enumerate(measured) if i + 1 < len(trace.iterations)] == \
        [trace.iterations[i + 1]["L"] for i in measured if i + 1 < len(trace.iterations)]
    assert [int(v) for _, v in events["adapt/batch_size"]] == [L * args.num_envs for L in logged_L]
    assert [int(v) for _, v in events["adapt/update_epochs"]] == [
        ppo.update_epochs_for(L, args.update_epochs, args.epochs_ref_steps, args.min_update_epochs) for L in logged_L]


def test_the_pages_tags_are_the_scripts(abs_run):
    """The adapt/* tags the page writes are those abs_ppo_mujoco.py writes in its KL mode (less delta_ESS)."""
    _, _, events, _, _ = abs_run
    adapt = {tag for tag in events if tag.startswith("adapt/")}
    source = (ROOT / "abs_ppo_mujoco.py").read_text(encoding="utf-8")
    assert adapt == {"adapt/kl", "adapt/kl_mean", "adapt/num_steps", "adapt/batch_size", "adapt/update_epochs"}
    assert all(f'"{tag}"' in source for tag in adapt)


def test_no_adapt_with_track_divergence_keeps_l_and_still_measures(tmp_path):
    args, trace, events, _, _ = run_recipe(tmp_path, **{**TINY, "adapt": False, "track_divergence": True,
                                                         "num_steps": 16, "total_timesteps": 300})
    assert {it["L"] for it in trace.iterations} == {16}  # --num-steps, not rounded, whatever the KL
    assert [i for i, it in enumerate(trace.iterations) if it["measured"]] == \
        [i for i in range(len(trace.iterations)) if (i + 1) % args.adapt_freq == 0] and trace.kls
    assert {v for _, v in events["adapt/num_steps"]} == {16}
    assert [v for _, v in events["adapt/kl_mean"]] == pytest.approx(
        [np.mean(trace.kls[max(0, j + 1 - args.window): j + 1]) for j in range(len(trace.kls))], rel=1e-6)


def test_the_pages_schedule_is_the_scripts_over_random_configurations():
    """The page's ABSScheduler, epoch rule and measurement test give abs_ppo_mujoco.py's L (float and rounded),
    window mean and epochs after every measurement, over 300 random configurations, both schedules, with and
    without a burn-in of its own, and through a state_dict round trip."""
    recipe, rng = recipe_module(), random.Random(0)
    configs = 0
    while configs < 300:
        multiple = rng.choice([1, 1, 2, 4, 8, 32, 64])
        L_min = rng.randint(1, 4096)
        L_max = rng.randint(L_min, 16 * L_min)
        lo, hi = ppo.multiples_in(L_min, L_max, multiple)
        if lo > hi:  # the scripts refuse such flags (flag_problems)
            continue
        delta_min = 10 ** rng.uniform(-6, -1)
        config = (L_min, L_max, rng.randint(1, 20), rng.choice([0.1, rng.uniform(0.01, 1.0)]), delta_min,
                  delta_min * 10 ** rng.uniform(0.1, 3), rng.choice(["log", "linear"]),
                  rng.choice([None, rng.randint(1, 25)]))
        mine, theirs = recipe["ABSScheduler"](*config, multiple=multiple), ppo.ABSScheduler(*config, multiple=multiple)
        base, ref = rng.randint(1, 20), rng.randint(1, 4096)
        for n in range(rng.randint(1, 60)):
            delta = config[4] * 10 ** rng.uniform(-1.5, 4)
            if rng.random() < 0.1:  # --no-adapt --track-divergence
                mine.record(delta), theirs.record(delta)
            else:
                assert mine.update(delta) == theirs.update(delta), config
            assert (mine.L, mine.num_steps, mine.delta_bar) == (theirs.L, theirs.num_steps, theirs.delta_bar), config
            assert lo <= mine.num_steps <= hi and mine.num_steps % multiple == 0
            assert recipe["update_epochs_for"](mine.num_steps, base, ref) == \
                ppo.update_epochs_for(theirs.num_steps, base, ref), (config, base, ref)
            if n == 5:
                restored = recipe["ABSScheduler"](*config, multiple=multiple)
                restored.load_state_dict(mine.state_dict())
                assert restored.state_dict() == theirs.state_dict()
                mine = restored
        K = rng.randint(1, 50)
        assert [recipe["measures_in"](i, K) for i in range(120)] == [ppo.measures_in(i, K) for i in range(120)]
        configs += 1


def test_the_pages_kl_is_the_scripts_summed_over_action_dimensions():
    """On two random agents of abs_ppo_mujoco.py's own shape (Hopper's 11 observations, 3 actions): the page's
    Agent.policy and behavioral_divergence give the script's, which is the KL of the joint Gaussian (torch's), 3 times
    the mean over the action dimensions."""
    from torch.distributions import Independent, Normal, kl_divergence

    recipe = recipe_module()
    torch.manual_seed(0)
    new, old = ppo.Agent(11, 3), ppo.Agent(11, 3)
    with torch.no_grad():
        old.actor_logstd.add_(0.3)
    states = torch.randn(256, 11)
    policy = recipe["Agent"].policy  # the page's method, on the script's agent
    for agent in (new, old):
        torch.testing.assert_close(policy(agent, states), agent.policy(states), rtol=0, atol=0)
    kl = recipe["behavioral_divergence"](new, old, states)
    assert kl == ppo.behavioral_divergence(new, old, states) == ppo.policy_divergences(new, old, states,
                                                                                       torch.zeros(256, 3))[0]
    joint = kl_divergence(Independent(Normal(*new.policy(states)), 1), Independent(Normal(*old.policy(states)), 1))
    assert kl == pytest.approx(joint.mean().item(), rel=1e-5) and kl > 0
    per_dimension = recipe["gaussian_kl"](*new.policy(states), *old.policy(states)) / 3
    assert kl == pytest.approx(3 * per_dimension.mean().item(), rel=1e-6)


def test_the_pages_flags_are_the_scripts_with_its_defaults():
    """Every flag the page adds is a flag of abs_ppo_mujoco.py with the same default (the MuJoCo bounds, K, W, M)."""
    body = ast.parse("class Args:\n" + page_blocks()["flags"]).body[0].body
    page = {node.target.id: ast.literal_eval(node.value) for node in body if isinstance(node, ast.AnnAssign)}
    script = {f.name: f.default for f in dataclasses.fields(ppo.Args)}
    assert {name: script.get(name, "missing") for name in page} == page
    assert {"num_steps_min", "num_steps_max", "adapt_freq", "window", "kl_low", "kl_high",
            "ref_batch_size"} <= set(page)
    for name in ("num_steps", "update_epochs", "num_minibatches", "learning_rate"):  # CleanRL's, that the rule reads
        assert name not in page and name in script


@pytest.mark.parametrize("order, slots", [(PPO_ORDER, "SLOTS"), (PQN_ORDER, "PQN_SLOTS"),
                                          (REPLAY_ORDER, "REPLAY_SLOTS")])
def test_every_cleanrl_stand_in_is_used_once(order, slots):
    blocks, slots = page_blocks(), globals()[slots]
    used = [m.group(2) for name in order for m in SLOT.finditer(blocks[name])]
    assert sorted(used) == sorted(slots), used


# ================================================================ the PQN path: CleanRL's pqn_atari_envpool.py
# CleanRL's Args of pqn_atari_envpool.py, the flags its loop reads, with CleanRL's defaults; the page's pqn-defaults
# block replaces some of these lines.
CLEANRL_PQN_ARGS = """
    seed: int = 1
    env_id: str = "Breakout-v5"
    total_timesteps: int = 10000000
    learning_rate: float = 2.5e-4
    num_envs: int = 8
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    num_minibatches: int = 4
    update_epochs: int = 4
    max_grad_norm: float = 10.0
    start_e: float = 1
    end_e: float = 0.01
    exploration_fraction: float = 0.10
    q_lambda: float = 0.65
"""

PQN_SLOTS = {
    "start the game": """
        global_step = 0
        next_obs = torch.as_tensor(envs.reset(), dtype=torch.float32, device=device)
        next_done = torch.zeros(args.num_envs, device=device)
        """,
    "one env step": """
        global_step += args.num_envs
        obs[step], dones[step] = next_obs, next_done
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                  global_step)
        with torch.no_grad():
            values[step], greedy = q_network(next_obs).max(dim=1)
        explore = torch.rand(args.num_envs, device=device) < epsilon
        action = torch.where(explore, torch.randint(0, envs.single_action_space.n, (args.num_envs,), device=device),
                             greedy)
        actions[step] = action
        next_obs, reward, next_done, info = envs.step(action.cpu().numpy())
        rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
        next_done = torch.as_tensor(next_done, dtype=torch.float32, device=device)
        game_over = next_done.bool().cpu().numpy() & (info["lives"] == 0)
        if game_over.any():
            avg_returns.extend(info["r"][game_over].tolist())
            writer.add_scalar("charts/avg_episodic_return", np.average(avg_returns), global_step)
        trace.step(obs[step], actions[step], values[step], rewards[step], next_done)
        trace.bootstrap(q_network, next_obs)
        """,
    "one minibatch's loss and optimizer step": """
        q_taken = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds].long().unsqueeze(1)).squeeze(1)
        loss = F.mse_loss(q_taken, b_returns[mb_inds])
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
        optimizer.step()
        """,
    "the iteration's logging": """
        writer.add_scalar("losses/td_loss", loss, global_step)
        trace.iteration(global_step, optimizer, q_network, scheduler, obs, b_obs, b_actions, b_returns)
        """,
}

PQN_HARNESS = '''
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

{imports}


{schedule}


@dataclass
class Args:  # CleanRL's flags that the loop reads (with the page's changed defaults), then the page's
{cleanrl}
{flags}


class QNetwork(nn.Module):  # CleanRL's PQN shape (LayerNorm after every layer, forward on x / 255.0), narrower
    def __init__(self, env):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 8, 8, stride=4), nn.LayerNorm([8, 20, 20]), nn.ReLU(),
            nn.Conv2d(8, 8, 4, stride=2), nn.LayerNorm([8, 9, 9]), nn.ReLU(), nn.Flatten(),
            nn.Linear(648, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, env.single_action_space.n))

    def forward(self, x):
        return self.network(x / 255.0)


def linear_schedule(start_e, end_e, duration, t):
    return max(start_e + (end_e - start_e) * t / duration, end_e)


{divergence}


def train(args, envs, writer, trace, device=torch.device("cpu")):
    q_network = QNetwork(envs).to(device)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate)
{loop}
    return q_network, snapshot, scheduler, global_step, obs
'''


def with_defaults(args_lines: str, block: str) -> str:
    """CleanRL's Args lines with each line of `block` in place of CleanRL's line of the same flag."""
    changed = {line.split(":")[0].strip(): line for line in block.splitlines() if line.strip()}
    out = [changed.pop(line.split(":")[0].strip(), line) for line in args_lines.strip("\n").splitlines()]
    assert not changed, f"pqn-defaults changes flags CleanRL's Args does not have: {sorted(changed)}"
    return "\n".join(out)


def pqn_module() -> dict:
    b = page_blocks()
    loop = "\n".join(fill_slots(b[name], PQN_SLOTS) for name in ("pqn-storage", "pqn-rollout", "pqn-update",
                                                                  "pqn-measure"))
    code = PQN_HARNESS.format(imports=b["imports"], schedule=b["schedule"], divergence=b["pqn-divergence"],
                              cleanrl=with_defaults(CLEANRL_PQN_ARGS, b["pqn-defaults"]), flags=b["pqn-flags"],
                              loop=textwrap.indent(loop, "    "))
    namespace = {"__name__": "recipe_pqn"}
    exec(compile(code, "docs/adding-abs.md, PQN (assembled by tests/test_recipe.py)", "exec"), namespace)
    return namespace


class CleanRLAtari:
    """envpool's Breakout-v5 as CleanRL's PQN sees it (envpool.make(..., env_type="gym") in envpool < 0.9): reset()
    gives the observations, step() gives (obs, reward, done, info) with done = terminated or truncated, and CleanRL's
    episode statistics of the game so far, info["r"] and info["l"], beside envpool's info["lives"]."""

    def __init__(self, num_envs, seed):
        import envpool
        self.env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=num_envs, seed=seed, episodic_life=True,
                                reward_clip=True, num_threads=1)
        self.num_envs, self.single_action_space = num_envs, self.env.action_space
        self.single_observation_space = self.env.observation_space
        self.single_action_space.seed(seed)

    def reset(self):
        self.returns, self.lengths = np.zeros(self.num_envs), np.zeros(self.num_envs, dtype=np.int64)
        return self.env.reset()[0]

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.returns += info["reward"]
        self.lengths += 1
        info = {**info, "r": self.returns.copy(), "l": self.lengths.copy()}
        game_over = info["terminated"].astype(bool) | truncated
        self.returns[game_over], self.lengths[game_over] = 0.0, 0
        return obs, reward, terminated | truncated, info

    def close(self):
        self.env.close()


class PQNTrace:
    """What each iteration of the assembled PQN loop did, read from the data it handled: the rows it collected, its
    targets against abs_pqn_atari.q_lambda_returns, the storage it used, the learning rate, the gradient steps
    (RAdam's count) and every measurement the scheduler received."""

    def __init__(self, args):
        self.args, self.rows, self.iterations, self.deltas, self.storage = args, [], [], [], set()

    def step(self, *row):
        self.rows.append([x.clone() for x in row])

    @torch.no_grad()
    def bootstrap(self, q_network, next_obs):  # max_a Q after the latest step, by the network that collected it
        self.last_value = q_network(next_obs).max(dim=1).values

    def iteration(self, global_step, optimizer, q_network, scheduler, obs, b_obs, b_actions, b_returns):
        L, E = len(self.rows), self.args.num_envs
        frames, actions, values, rewards, ended = (torch.stack(x) for x in zip(*self.rows))
        assert b_obs.dtype == torch.uint8 and torch.equal(b_obs, frames.reshape(b_obs.shape))
        assert torch.equal(b_actions, actions.reshape(b_actions.shape))
        self.storage.add((obs.data_ptr(), tuple(obs.shape)))  # allocated once: one buffer for every iteration
        # Q(lambda) over these L rows, bootstrapped with max_a Q after the last one; an episode end stops the target
        next_values = torch.cat([values[1:], self.last_value.unsqueeze(0)])
        expected = pqn.q_lambda_returns(rewards, next_values, ended, ended, self.args.gamma, self.args.q_lambda)
        torch.testing.assert_close(b_returns, expected.reshape(-1), rtol=1e-5, atol=1e-6)
        adam_steps = int(optimizer.state[next(q_network.parameters())]["step"])
        done_before = sum(it["gradient_steps"] for it in self.iterations)
        self.iterations.append({"L": L, "start": global_step - L * E, "lr": optimizer.param_groups[0]["lr"],
                                "gradient_steps": adam_steps - done_before, "ended": int(ended.sum()),
                                "measured": scheduler.num_measurements > len(self.deltas)})
        if self.iterations[-1]["measured"]:
            self.deltas.append(scheduler.history[-1])
        self.rows = []


@contextlib.contextmanager
def one_thread():
    """torch on one thread: the runs' networks are tiny, and a second thread only spins against envpool's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_pqn_recipe(tmp_path, **overrides):
    from torch.utils.tensorboard import SummaryWriter

    recipe = pqn_module()
    args = recipe["Args"](**overrides)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    envs, writer, trace = CleanRLAtari(args.num_envs, args.seed), SummaryWriter(str(tmp_path)), PQNTrace(args)
    with one_thread():
        q_network, snapshot, scheduler, global_step, obs = recipe["train"](args, envs, writer, trace)
    writer.close()
    envs.close()
    return args, trace, events_of(tmp_path), global_step, obs


def events_of(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# 4 envs in 2 minibatches, L in [4, 16] (every length), K = 2, W = burn-in = 2, a fast EMA, the epoch rule at 2
# epochs for L = 8, a learning rate that moves the greedy actions, and the paper's bounds of 5% and 95%.
PQN_TINY = dict(num_envs=4, num_minibatches=2, total_timesteps=1200, num_steps_min=4, num_steps_max=16, adapt_freq=2,
                window=2, ema_beta=0.5, ref_batch_size=32, epochs_ref_steps=8, learning_rate=1e-3, anneal_lr=True,
                exploration_fraction=0.5)


@pytest.fixture(scope="module")
def pqn_run(tmp_path_factory):
    return run_pqn_recipe(tmp_path_factory.mktemp("recipe_pqn"), **PQN_TINY)


def test_the_pqn_loop_uses_uint8_storage_allocated_once_and_q_lambda_targets_over_l_rows(pqn_run):
    args, trace, _, global_step, obs = pqn_run
    assert trace.storage == {(obs.data_ptr(), (args.num_steps_max, args.num_envs, 4, 84, 84))}
    assert obs.dtype == torch.uint8
    assert sum(it["ended"] for it in trace.iterations) > 0  # the targets were checked across episode ends too
    assert args.total_timesteps <= global_step < args.total_timesteps + args.num_envs * args.num_steps_max


def test_the_pqn_loop_follows_abs_pqn_atari_iteration_by_iteration(pqn_run):
    """L, the epochs (counted as RAdam's steps), the learning rate and the measured iterations are what
    abs_pqn_atari.py's ABSScheduler, update_epochs_for, learning_rate_at and measures_in give for the same
    measurements; L moves, first at the iteration after the W-th measurement (iteration W x K, counted from 1)."""
    args, trace, events, _, _ = pqn_run
    its = trace.iterations
    script = pqn.ABSScheduler(args.num_steps_min, args.num_steps_max, args.window, args.ema_beta, args.divergence_low,
                              args.divergence_high, "log", args.burn_in)
    deltas = iter(trace.deltas)
    for i, it in enumerate(its):
        assert it["L"] == script.num_steps, i
        assert it["gradient_steps"] == pqn.update_epochs_for(it["L"], args.update_epochs,
                                                             args.epochs_ref_steps) * args.num_minibatches, i
        assert it["lr"] == pytest.approx(pqn.learning_rate_at(args.learning_rate, it["start"], args.total_timesteps,
                                                              args.anneal_lr), rel=1e-12, abs=0), i
        assert it["measured"] == pqn.measures_in(i, args.adapt_freq), i
        if it["measured"]:
            script.update(next(deltas))
    assert next(deltas, None) is None
    assert [it["start"] for it in its] == [sum(x["L"] for x in its[:i]) * args.num_envs for i in range(len(its))]
    lengths = [it["L"] for it in its]
    first_move = next(i for i, L in enumerate(lengths) if L != args.num_steps_min)
    assert first_move == args.window * args.adapt_freq and len(set(lengths)) >= 3, lengths
    assert len({pqn.update_epochs_for(L, args.update_epochs, args.epochs_ref_steps) for L in lengths}) >= 2
    assert any(args.divergence_low < d < args.divergence_high for d in trace.deltas), trace.deltas  # the log map
    # what the page logs at each measurement: the divergence, its window mean, and the next iteration's L and epochs
    measured = [i for i, it in enumerate(its) if it["measured"]]
    assert [v for _, v in events["adapt/divergence"]] == pytest.approx(trace.deltas, rel=1e-6)
    logged_L = [int(v) for _, v in events["adapt/num_steps"]]
    assert [logged_L[j] for j, i in enumerate(measured) if i + 1 < len(its)] == \
        [its[i + 1]["L"] for i in measured if i + 1 < len(its)]
    assert [int(v) for _, v in events["adapt/batch_size"]] == [L * args.num_envs for L in logged_L]
    assert [int(v) for _, v in events["adapt/update_epochs"]] == [
        pqn.update_epochs_for(L, args.update_epochs, args.epochs_ref_steps) for L in logged_L]
    source = (ROOT / "abs_pqn_atari.py").read_text(encoding="utf-8")
    assert all(f'"{tag}"' in source for tag in events if tag.startswith("adapt/"))


def test_the_pqn_loop_with_no_adapt_at_the_reference_length_is_cleanrls(tmp_path):
    """--no-adapt with --num-steps equal to --epochs-ref-steps: every iteration is CleanRL's, L fixed, CleanRL's
    --update-epochs, its per-iteration learning rate; with --track-divergence the window is still measured."""
    args, trace, events, _, _ = run_pqn_recipe(tmp_path, **{**PQN_TINY, "adapt": False, "track_divergence": True,
                                                            "num_steps": 8, "total_timesteps": 8 * 4 * 6})
    its, batch = trace.iterations, args.num_steps * args.num_envs
    assert [it["L"] for it in its] == [8] * 6
    assert {it["gradient_steps"] for it in its} == {args.update_epochs * args.num_minibatches}
    num_iterations = args.total_timesteps // batch  # CleanRL: lr x (1 - (iteration - 1) / num_iterations)
    assert [it["lr"] for it in its] == pytest.approx(
        [args.learning_rate * (1.0 - (i - 1.0) / num_iterations) for i in range(1, num_iterations + 1)], rel=1e-12)
    assert [i for i, it in enumerate(its) if it["measured"]] == [1, 3, 5]
    assert {v for _, v in events["adapt/num_steps"]} == {8}


def test_the_pqn_blocks_flags_and_defaults_are_abs_pqn_atari_s():
    """Every flag pqn-flags adds is a flag of abs_pqn_atari.py with its default, and every default pqn-defaults
    changes is one of CleanRL's flags, changed to abs_pqn_atari.py's."""
    blocks, script = page_blocks(), {f.name: f.default for f in dataclasses.fields(pqn.Args)}
    added, changed, cleanrl = (flag_defaults(blocks["pqn-flags"]), flag_defaults(blocks["pqn-defaults"]),
                               flag_defaults(CLEANRL_PQN_ARGS))
    assert {name: script.get(name, "missing") for name in added} == added and not set(added) & set(cleanrl)
    assert {name: script[name] for name in changed} == changed
    assert all(name in cleanrl and cleanrl[name] != value for name, value in changed.items())
    # the flags the schedule reads that CleanRL already has: the page leaves those it does not name at CleanRL's
    for name in ("learning_rate", "num_minibatches", "gamma", "q_lambda", "max_grad_norm", "start_e"):
        assert name not in changed and cleanrl[name] == script[name], name
    assert {"kl_low", "kl_high", "min_update_epochs"}.isdisjoint(added)


def flag_defaults(block: str) -> dict:
    body = ast.parse("class Args:\n" + textwrap.indent(textwrap.dedent(block), "    ")).body[0].body
    return {node.target.id: ast.literal_eval(node.value) for node in body if isinstance(node, ast.AnnAssign)}


def test_the_pages_greedy_divergence_is_abs_pqn_atari_s():
    recipe = pqn_module()
    torch.manual_seed(0)
    new, old = pqn.QNetwork(6), pqn.QNetwork(6)
    states = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)
    delta = recipe["behavioral_divergence"](new, old, states)
    assert delta == pqn.behavioral_divergence(new, old, states) and 0.0 < delta <= 1.0
    assert recipe["behavioral_divergence"](new, copy.deepcopy(new), states) == 0.0


# ================================================================ the replay path: CleanRL's dqn_atari.py
# CleanRL's Args of dqn_atari.py, the flags its loop reads, with CleanRL's defaults.
CLEANRL_DQN_ARGS = """
    seed: int = 1
    env_id: str = "BreakoutNoFrameskip-v4"
    total_timesteps: int = 10000000
    learning_rate: float = 1e-4
    num_envs: int = 1
    buffer_size: int = 1000000
    gamma: float = 0.99
    tau: float = 1.0
    target_network_frequency: int = 1000
    batch_size: int = 32
    start_e: float = 1
    end_e: float = 0.01
    exploration_fraction: float = 0.10
    learning_starts: int = 80000
    train_frequency: int = 4
"""

REPLAY_SLOTS = {
    "one env step into the replay buffer": """
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                  global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                actions = q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, next_obs, actions, rewards, terminations, infos)
        obs = next_obs
        """,
    "the TD loss and the optimizer step": """
        with torch.no_grad():
            target_max = target_network(data.next_observations).max(dim=1).values
            td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
        old_val = q_network(data.observations).gather(1, data.actions).squeeze(1)
        loss = F.mse_loss(td_target, old_val)
        if global_step % 100 == 0:
            writer.add_scalar("losses/td_loss", loss, global_step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trace.gradient_step(grad_steps, global_step, data, ref_states, scheduler, rb)
        """,
    "update the target network": """
        if global_step % args.target_network_frequency == 0:
            for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)
            trace.copies.append(grad_steps)
        """,
}

REPLAY_HARNESS = '''
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

{imports}


{schedule}


@dataclass
class Args:  # CleanRL's flags that the loop reads (its defaults), then the page's
{cleanrl}
{flags}


class QNetwork(nn.Module):  # CleanRL's DQN shape (Nature CNN without normalisation, forward on x / 255.0), narrower
    def __init__(self, env):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Conv2d(8, 8, 4, stride=2), nn.ReLU(), nn.Flatten(),
            nn.Linear(648, 32), nn.ReLU(), nn.Linear(32, env.single_action_space.n))

    def forward(self, x):
        return self.network(x / 255.0)


def linear_schedule(start_e, end_e, duration, t):
    return max(start_e + (end_e - start_e) * t / duration, end_e)


{divergence}


{replay_divergence}


def train(args, envs, rb, writer, trace, device=torch.device("cpu")):
    q_network = QNetwork(envs).to(device)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())
{setup}
    obs, _ = envs.reset(seed=args.seed)
{loop}
    return scheduler, grad_steps
'''


class ReplayBuffer:
    """What the loop uses of cleanrl_utils.buffers.ReplayBuffer as dqn_atari.py makes it (optimize_memory_usage=True,
    written here): one array of observations [buffer_size, n_envs, *obs_shape] in the observation space's dtype, whose
    row pos holds the newest next observation; pos, full, n_envs, obs_shape; sample(n) draws n rows uniformly, never
    row pos, and gives observations, actions, next_observations, dones and rewards as tensors."""

    def __init__(self, buffer_size, observation_space, n_envs=1):
        self.buffer_size, self.n_envs, self.obs_shape = buffer_size // n_envs, n_envs, observation_space.shape
        self.observations = np.zeros((self.buffer_size, n_envs, *self.obs_shape), dtype=observation_space.dtype)
        self.actions = np.zeros((self.buffer_size, n_envs, 1), dtype=np.int64)
        self.rewards, self.dones = np.zeros((2, self.buffer_size, n_envs), dtype=np.float32)
        self.pos, self.full, self.rows_added = 0, False, 0

    def add(self, obs, next_obs, action, reward, done, infos):
        self.observations[self.pos], self.observations[(self.pos + 1) % self.buffer_size] = obs, next_obs
        self.actions[self.pos], self.rewards[self.pos], self.dones[self.pos] = action.reshape(-1, 1), reward, done
        self.pos, self.rows_added = (self.pos + 1) % self.buffer_size, self.rows_added + 1
        self.full = self.full or self.pos == 0

    def sample(self, batch_size):
        rows = ((np.random.randint(1, self.buffer_size, size=batch_size) + self.pos) % self.buffer_size if self.full
                else np.random.randint(0, self.pos, size=batch_size))
        envs = np.random.randint(0, self.n_envs, size=batch_size)
        data = (self.observations[rows, envs], self.actions[rows, envs],
                self.observations[(rows + 1) % self.buffer_size, envs], self.dones[rows, envs].reshape(-1, 1),
                self.rewards[rows, envs].reshape(-1, 1))
        return ReplaySamples(*(torch.as_tensor(x) for x in data))


class OneAtariGame:
    """dqn_atari.py's env as its loop sees it: one Atari game behind gymnasium's vector API (here envpool's
    Breakout-v5, with its life loss, reward clipping and 4 stacked 84 x 84 frames)."""

    def __init__(self, seed):
        import envpool
        self.env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=seed, episodic_life=True,
                                reward_clip=True, num_threads=1)
        self.num_envs, self.single_action_space = 1, self.env.action_space
        self.single_observation_space = self.env.observation_space
        self.single_action_space.seed(seed)

    def reset(self, seed=None):
        return self.env.reset()

    def step(self, actions):
        return self.env.step(actions)

    def close(self):
        self.env.close()


class ReplaySamples(NamedTuple):
    observations: torch.Tensor
    actions: torch.Tensor
    next_observations: torch.Tensor
    dones: torch.Tensor
    rewards: torch.Tensor


def replay_module() -> dict:
    b = page_blocks()
    code = REPLAY_HARNESS.format(
        imports=b["imports"], schedule=b["schedule"], cleanrl=CLEANRL_DQN_ARGS.strip("\n"), flags=b["replay-flags"],
        divergence=b["pqn-divergence"], replay_divergence=b["replay-divergence"],
        setup=textwrap.indent(b["replay-setup"], "    "),
        loop=textwrap.indent(fill_slots(b["replay-loop"], REPLAY_SLOTS), "    "))
    namespace = {"__name__": "recipe_replay"}
    exec(compile(code, "docs/adding-abs.md, replay (assembled by tests/test_recipe.py)", "exec"), namespace)
    return namespace


class ReplayTrace:
    """Every gradient step of the assembled replay loop: its batch (the rows rb.sample gave), the env step, the
    measurements the scheduler had received before it and the latest, when a measurement started (a new set of
    reference states, checked to come from the newest rows of the buffer), and the target copies."""

    def __init__(self, args):
        self.args, self.steps, self.starts, self.copies, self.ref_states = args, [], [], [], None

    def gradient_step(self, grad_steps, global_step, data, ref_states, scheduler, rb):
        assert grad_steps == len(self.steps)
        self.steps.append({"batch": len(data.observations), "global_step": global_step, "L": scheduler.L,
                           "measurements": scheduler.num_measurements,
                           "latest": scheduler.history[-1] if scheduler.history else None})
        if ref_states is not None and ref_states is not self.ref_states:
            self.starts.append(grad_steps)
            rows_back = 2 * math.ceil(self.args.ref_batch_size / rb.n_envs)
            newest = rb.observations[(rb.pos - 1 - np.arange(rows_back)) % rb.buffer_size].reshape(-1, 4, 84, 84)
            assert ref_states.dtype == torch.uint8 and len(ref_states) == min(self.args.ref_batch_size, len(newest))
            newest = {row.tobytes() for row in newest}
            assert all(state.numpy().tobytes() in newest for state in ref_states)
        self.ref_states = ref_states


def run_replay_recipe(tmp_path, **overrides):
    from torch.utils.tensorboard import SummaryWriter

    recipe = replay_module()
    args = recipe["Args"](**overrides)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)
    envs = OneAtariGame(args.seed)
    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space)
    writer, trace = SummaryWriter(str(tmp_path)), ReplayTrace(args)
    with one_thread():
        scheduler, grad_steps = recipe["train"](args, envs, rb, writer, trace)
    writer.close()
    envs.close()
    return args, trace, events_of(tmp_path), scheduler, grad_steps, rb


# One env, learning from step 64, a gradient step every 2 env steps, target copies every 8 env steps (4 gradient
# steps), measurements every 4 gradient steps over a span of 2, the batch in [32, 128] in multiples of 32, W = 2, a
# fast EMA, a buffer that wraps around, and the paper's bounds of 5% and 95%.
REPLAY_TINY = dict(total_timesteps=380, learning_starts=64, train_frequency=2, target_network_frequency=8,
                   buffer_size=300, batch_size_min=32, batch_size_max=128, adapt_freq=4, divergence_span=2, window=2,
                   ema_beta=0.5, ref_batch_size=32, learning_rate=1e-3, exploration_fraction=0.5)


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    return run_replay_recipe(tmp_path_factory.mktemp("recipe_replay"), **REPLAY_TINY)


def test_the_replay_loop_follows_abs_btr_gradient_step_by_gradient_step(replay_run):
    """The batch of every gradient step, and the gradient steps at which measurements start and end, are what
    abs_btr.py's ABSScheduler, batch_size_of, measurement_offset and measurement_starts give for the same
    measurements; the batch moves, first at the gradient step after the W-th measurement."""
    args, trace, events, scheduler, grad_steps, rb = replay_run
    steps = trace.steps
    assert len(steps) == grad_steps and rb.full  # the newest rows were read across the wrap-around too
    script = btr.ABSScheduler(args.batch_size_min, args.batch_size_max, args.window, args.ema_beta,
                              args.divergence_low, args.divergence_high, "log", args.burn_in)
    offset = btr.measurement_offset(args.divergence_offset, args.target_network_frequency // args.train_frequency)
    counts = [s["measurements"] for s in steps] + [scheduler.num_measurements]
    latest = [s["latest"] for s in steps] + [scheduler.history[-1]]
    starts, ends, measure_at = [], [], None
    for g, step in enumerate(steps):
        if measure_at is None and btr.measurement_starts(g, args.adapt_freq, offset):
            starts.append(g)
            measure_at = g + args.divergence_span
        assert step["batch"] == btr.batch_size_of(script, args) and step["L"] == script.L, g
        assert step["global_step"] == args.learning_starts + args.train_frequency * (g + 1)
        if measure_at == g + 1:  # measured after this step: the page's scheduler got one more measurement
            assert counts[g + 1] == counts[g] + 1, g
            script.update(latest[g + 1])
            ends.append(g + 1)
            measure_at = None
        else:
            assert counts[g + 1] == counts[g], g
    assert trace.starts == starts and len(ends) >= 2 * args.window
    # the float state first moves at the W-th measurement, and the batch it rounds to moves more than once
    batches = [s["batch"] for s in steps]
    assert next(g for g, s in enumerate(steps) if s["L"] != args.batch_size_min) == ends[args.window - 1]
    assert len(set(batches)) >= 3, batches
    assert all(b % args.batch_size_multiple == 0 for b in batches)
    deltas = [latest[g] for g in ends]
    assert any(args.divergence_low < d < args.divergence_high for d in deltas), deltas
    # no span holds a target copy: the default offset puts the spans mid-way between two copies
    assert trace.copies and not [c for c in trace.copies for s in starts if s < c < s + args.divergence_span]
    assert [v for _, v in events["adapt/divergence"]] == pytest.approx(deltas, rel=1e-6)
    assert [int(v) for _, v in events["adapt/batch_size"]] == [batches[g] for g in ends if g < len(batches)] + \
        [btr.batch_size_of(script, args)] * (ends[-1] == len(batches))
    source = (ROOT / "abs_btr.py").read_text(encoding="utf-8")
    assert all(f'"{tag}"' in source for tag in events if tag.startswith("adapt/"))


def test_the_replay_loop_with_no_adapt_samples_cleanrls_batch(tmp_path):
    args, trace, events, scheduler, _, _ = run_replay_recipe(tmp_path, **{**REPLAY_TINY, "adapt": False,
                                                                        "track_divergence": True, "batch_size": 48,
                                                                        "total_timesteps": 200})
    assert {s["batch"] for s in trace.steps} == {48} and trace.starts and scheduler.num_measurements
    assert {v for _, v in events["adapt/batch_size"]} == {48}


def test_the_replay_blocks_flags_are_abs_btr_s():
    added, cleanrl = flag_defaults(page_blocks()["replay-flags"]), flag_defaults(CLEANRL_DQN_ARGS)
    script = {f.name: f.default for f in dataclasses.fields(btr.Args)}
    assert {name: script.get(name, "missing") for name in added} == added and not set(added) & set(cleanrl)
    assert {"batch_size_min", "batch_size_max", "batch_size_multiple", "adapt_freq", "divergence_span",
            "ref_batch_size"} <= set(added)


def test_the_pages_measurement_start_and_newest_states_are_abs_btr_s():
    """measurement_starts gives abs_btr.py's answer; newest_states draws, like abs_btr.py's replay.newest_states,
    M distinct states from the newest 2 x ceil(M / E) rows of every env, across the buffer's wrap-around."""
    recipe, rng = replay_module(), random.Random(0)
    for _ in range(2000):
        g, K, offset = rng.randint(0, 3000), rng.randint(1, 600), rng.randint(0, 700)
        assert recipe["measurement_starts"](g, K, offset) == btr.measurement_starts(g, K, offset)
    space = gym.spaces.Box(0, 255, (2, 3), np.uint8)
    for n_envs, count, added in ((1, 8, 5), (1, 8, 40), (3, 7, 11), (4, 16, 100)):
        rb = ReplayBuffer(30 * n_envs, space, n_envs=n_envs)
        for t in range(added):  # each state holds its own number, so that it can be traced to its row
            states = (np.arange(n_envs) * 1000 + t).astype(np.uint16)
            obs = np.stack([np.full((2, 3), s % 251, np.uint8) for s in states])
            obs[:, 0, 0], obs[:, 0, 1] = states % 256, states // 256
            rb.add(obs, obs, np.zeros(n_envs), np.zeros(n_envs), np.zeros(n_envs), {})
        got = recipe["newest_states"](rb, count, torch.device("cpu")).numpy()
        numbers = got[:, 0, 0].astype(int) + 256 * got[:, 0, 1].astype(int)
        rows_back = min(rb.buffer_size if rb.full else rb.pos, 2 * math.ceil(count / n_envs))
        allowed = {e * 1000 + t for e in range(n_envs) for t in range(added - rows_back, added)}
        assert len(set(numbers.tolist())) == len(numbers) == min(count, rows_back * n_envs)
        assert set(numbers.tolist()) <= allowed, (n_envs, count, added)


# ================================================================ the numbers the page states
def first_move_on_policy(recipe, args, low, high, multiple=1):
    """With the page's scheduler and measures_in, and every measurement at delta_min (the largest target): the env
    steps done when the first measurement is made, and the iterations and steps done when L first changes."""
    scheduler = recipe["ABSScheduler"](args.num_steps_min, args.num_steps_max, args.window, args.ema_beta, low, high,
                                       burn_in=args.burn_in, multiple=multiple)
    steps, first_measurement, iteration = 0, None, 0
    while True:
        L = scheduler.num_steps
        steps += L * args.num_envs
        if recipe["measures_in"](iteration, args.adapt_freq):
            first_measurement = first_measurement or steps
            scheduler.update(low)
        iteration += 1
        if scheduler.num_steps != L:
            return first_measurement, iteration, steps


def first_move_replay(recipe, args):
    """The same for the replay path: the gradient steps done (and env steps) when the first measurement ends, and
    when the batch first changes."""
    scheduler = recipe["ABSScheduler"](args.batch_size_min, args.batch_size_max, args.window, args.ema_beta,
                                       args.divergence_low, args.divergence_high, burn_in=args.burn_in,
                                       multiple=args.batch_size_multiple)
    offset = btr.measurement_offset(args.divergence_offset, args.target_network_frequency // args.train_frequency)
    done, measure_at, first_end = 0, None, None
    while True:
        B = scheduler.num_steps
        if measure_at is None and recipe["measurement_starts"](done, args.adapt_freq, offset):
            measure_at = done + args.divergence_span
        done += 1
        if measure_at == done:
            scheduler.update(args.divergence_low)
            measure_at, first_end = None, first_end or done
        if scheduler.num_steps != B:
            env_step = args.learning_starts + args.train_frequency * np.array([first_end, done])
            return first_end, done, *env_step.tolist()


def test_the_pages_numbers_follow_from_its_blocks_and_the_scripts():
    """Each number the PQN, DQN and "Check your loop" sections state, computed from the blocks' defaults, CleanRL's
    (the flags above), the page's functions and the scripts'."""
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    ppo_recipe, pqn_recipe, replay_recipe = recipe_module(), pqn_module(), replay_module()
    a, q, r = ppo_recipe["Args"](), pqn_recipe["Args"](), replay_recipe["Args"]()
    cleanrl_pqn, cleanrl_dqn = flag_defaults(CLEANRL_PQN_ARGS), flag_defaults(CLEANRL_DQN_ARGS)
    lengths = range(q.num_steps_min, q.num_steps_max + 1)
    expected = [
        f"L from {q.num_steps_min} to {q.num_steps_max}",
        f"batches of {q.num_steps_min * q.num_envs:,} to {q.num_steps_max * q.num_envs:,}",
        f"CleanRL's {cleanrl_pqn['num_envs']} envs would make them {q.num_steps_min * cleanrl_pqn['num_envs']} to "
        f"{q.num_steps_max * cleanrl_pqn['num_envs']}",
        f"max({q.update_epochs}, round({q.update_epochs} L / {q.epochs_ref_steps}))",
        f"20M steps, epsilon down to {q.end_e}",
        f"`--num-minibatches` stays {q.num_minibatches}: {q.num_envs} envs divide",
        f"every length from {q.num_steps_min} to {q.num_steps_max} ({len(lengths)} of them",
    ]
    assert q.total_timesteps == 20_000_000 and not q.anneal_lr
    assert all(L * q.num_envs % q.num_minibatches == 0 for L in lengths)
    epochs = [pqn.update_epochs_for(L, q.update_epochs, q.epochs_ref_steps) for L in lengths]
    runs = [(e, min(L for L, x in zip(lengths, epochs) if x == e), max(L for L, x in zip(lengths, epochs) if x == e))
            for e in sorted(set(epochs))]
    sentence = re.search(r"gives (\d+) epochs up to L = (\d+), (\d+) from (\d+) to (\d+) and (\d+) from (\d+) to (\d+)",
                         page).groups()
    assert [int(x) for x in sentence] == [runs[0][0], runs[0][2], *runs[1], *runs[2]]
    assert len(runs) == 3 and runs[0][1] == q.num_steps_min
    frame = math.prod(pqn.envpool.make_spec("Breakout-v5").observation_space.shape)  # 4 x 84 x 84 bytes
    uint8 = q.num_steps_max * q.num_envs * frame
    expected += [f"At L_max = {q.num_steps_max} with {q.num_envs} envs the observations take {round(uint8 / 1e6)} MB",
                 f"in CleanRL's float32 they would take {round(4 * uint8 / 1e6)} MB"]
    # the replay path
    period = cleanrl_dqn["target_network_frequency"] // cleanrl_dqn["train_frequency"]
    offset = btr.measurement_offset(None, period)
    expected += [
        f"CleanRL's `--batch-size` ({cleanrl_dqn['batch_size']})",
        f"[{r.batch_size_min}, {r.batch_size_max}] is `abs_btr.py`'s range, half and double BTR's "
        f"{btr.Args.batch_size}",
        f"trains on {r.batch_size_min // r.batch_size} to {r.batch_size_max // r.batch_size} times CleanRL's batch",
        f"with CleanRL's {r.target_network_frequency:,} and {r.train_frequency}, copies every {period} gradient steps "
        f"and measurements starting at gradient steps {offset}, {offset + r.adapt_freq}, {offset + 2 * r.adapt_freq:,}",
        f"as CleanRL's {r.learning_starts:,} is",
    ]
    assert btr.Args.batch_size == 2 * r.batch_size_min == r.batch_size_max // 2
    assert r.learning_starts % r.target_network_frequency == 0 == r.target_network_frequency % r.train_frequency
    # the table of first measurements and first moves, at the defaults
    measured, iterations, steps = first_move_on_policy(ppo_recipe, a, a.kl_low, a.kl_high, a.num_minibatches)
    expected.append(f"| PPO | {a.adapt_freq}, {a.window} | after {measured:,} steps | after iteration "
                    f"{iterations}, step {steps:,} |")
    assert iterations == a.window * a.adapt_freq
    measured, iterations, steps = first_move_on_policy(pqn_recipe, q, q.divergence_low, q.divergence_high)
    expected.append(f"| PQN | {q.adapt_freq}, {q.window} | after {measured:,} steps | after iteration "
                    f"{iterations}, step {steps:,} |")
    assert iterations == q.window * q.adapt_freq
    first_end, moved, first_step, moved_step = first_move_replay(replay_recipe, r)
    expected.append(f"| DQN | {r.adapt_freq}, {r.window} | after gradient step {first_end} (step {first_step:,}) | "
                    f"after gradient step {moved:,} (step {moved_step:,}) |")
    # the short runs
    quick = dict(adapt_freq=2, window=2)
    _, iterations, ppo_steps = first_move_on_policy(ppo_recipe, ppo_recipe["Args"](**quick), a.kl_low, a.kl_high,
                                                    a.num_minibatches)
    _, pqn_iterations, pqn_steps = first_move_on_policy(pqn_recipe, pqn_recipe["Args"](**quick, num_envs=8),
                                                        q.divergence_low, q.divergence_high)
    assert iterations == pqn_iterations
    expected.append(f"With `--adapt-freq 2 --window 2`, L can first move after {iterations} iterations: at step "
                    f"{ppo_steps:,} for PPO, and for PQN with `--num-envs 8` at step {pqn_steps:,}")
    _, moved, _, moved_step = first_move_replay(replay_recipe, replay_recipe["Args"](learning_starts=10000,
                                                                                     adapt_freq=250, window=2))
    expected.append(f"`--learning-starts 10000 --adapt-freq 250 --window 2` gives the first possible move after "
                    f"gradient step {moved} (step {moved_step:,})")
    # --no-adapt away from the reference length
    expected.append(f"`--no-adapt --num-steps 4096` trains "
                    f"{ppo.update_epochs_for(4096, a.update_epochs, a.epochs_ref_steps, a.min_update_epochs)} epochs, "
                    f"not {a.update_epochs}")
    missing = [e for e in expected if e not in page]
    assert not missing, missing


# ================================================================ CleanRL's real files: what the page says they need
RECORD = ROOT / "bench" / "recipe-cleanrl" / "README.md"


def test_the_pages_envpool_port_of_cleanrls_pqn_is_what_the_pinned_envpool_needs():
    """"Check your loop" on pqn_atari_envpool.py: envpool 1.x (this project pins 1.2.5) gives gymnasium's API
    for env_type="gym" (reset: observations and an info dict; step: five values), has num_envs and the single spaces
    as read-only properties, and a gymnasium wrapper around it does not pass them on but takes them when set on it;
    the infos CleanRL's wrapper and loop read are there. The page's four edits say exactly that."""
    import envpool

    pins = re.findall(r"^envpool==([\d.]+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)
    assert pins == ["1.2.5"] and envpool.__version__ == "1.2.5"
    env = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True, seed=1,
                       num_threads=1)
    try:
        reset = env.reset()
        assert isinstance(reset, tuple) and len(reset) == 2 and reset[0].shape == (2, 4, 84, 84)
        step = env.step(np.zeros(2, dtype=np.int64))
        assert len(step) == 5 and {"reward", "terminated", "lives"} <= set(step[4])
        with pytest.raises(AttributeError, match="num_envs"):
            env.num_envs = 2
        assert env.single_action_space == env.action_space and env.single_observation_space == env.observation_space
        wrapped = gym.Wrapper(env)
        with pytest.raises(AttributeError):
            wrapped.single_action_space
        wrapped.single_action_space = env.action_space  # edit 4: set after wrapping
        assert wrapped.single_action_space.n == 4
    finally:
        env.close()
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    for edit in ["`import gymnasium as gym` in place of `import gym`",
                 "`observations, _ = super().reset(**kwargs)`",
                 "`observations, rewards, terminations, truncations, infos = super().step(action)` and then "
                 "`dones = np.logical_or(terminations, truncations)`",
                 "move to just after `envs = RecordEpisodeStatistics(envs)`",
                 "`property 'num_envs' of 'AtariGymnasiumEnvPool' object has no setter`"]:
        assert edit in page, edit


def test_the_pages_gymnasium_1x_changes_for_cleanrls_dqn_hold():
    """"Check your loop" on dqn_atari.py under gymnasium 1.x: the NoFrameskip-v4 ids come with
    gym.register_envs(ale_py), the wrappers have 1.x's names, ResizeObservation needs opencv (which this project's
    requirements do not install), and the page's dqn-episodes block reads the return and length of every episode a
    SAME_STEP vector env ends, from 1.x's final_info, which comes with final_obs."""
    import ale_py

    gym.register_envs(ale_py)
    assert gym.spec("BreakoutNoFrameskip-v4").id == "BreakoutNoFrameskip-v4"
    assert hasattr(gym.wrappers, "GrayscaleObservation") and hasattr(gym.wrappers, "FrameStackObservation")
    assert not hasattr(gym.wrappers, "GrayScaleObservation") and not hasattr(gym.wrappers, "FrameStack")
    assert "opencv" not in (ROOT / "requirements.txt").read_text(encoding="utf-8").lower()
    if importlib.util.find_spec("cv2") is None:
        game = gym.make("BreakoutNoFrameskip-v4")
        with pytest.raises(gym.error.DependencyNotInstalled, match="opencv"):
            gym.wrappers.ResizeObservation(game, (84, 84))
        game.close()

    class Writer:
        def __init__(self):
            self.scalars = []

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, float(value), step))

    block = page_blocks()["dqn-episodes"]
    envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))] * 2,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    writer, lengths, ended = Writer(), np.zeros(2, dtype=np.int64), []
    envs.reset(seed=1)
    for global_step in range(300):
        _, rewards, terminations, truncations, infos = envs.step(np.array([global_step % 2, 0]))
        lengths += 1
        done = np.logical_or(terminations, truncations)
        if "final_info" in infos:  # dqn_atari.py's test, around the block
            assert "final_obs" in infos
            with contextlib.redirect_stdout(None):
                exec(block, {"np": np, "infos": infos, "global_step": global_step, "writer": writer})
        for idx in np.flatnonzero(done):  # CartPole: a reward of 1 a step, so the return is the length
            ended += [("charts/episodic_return", float(lengths[idx]), global_step),
                      ("charts/episodic_length", float(lengths[idx]), global_step)]
            lengths[idx] = 0
    envs.close()
    assert len(ended) >= 4 and writer.scalars == ended


def record_tables() -> list:
    """The tables of the record, each as (its adapt/* column names, rows of float values by column)."""
    tables = []
    for block in re.findall(r"^\| global step \|.*?(?=\n\n|\Z)", RECORD.read_text(encoding="utf-8"), re.M | re.S):
        lines = [line.strip("|").split("|") for line in block.strip().splitlines()]
        columns = [c.strip().strip("`") for c in lines[0]]
        rows = [{c: float(np.float32(v)) for c, v in zip(columns, line)} for line in lines[2:]]
        tables.append((columns, rows))
    return tables


def test_the_record_of_following_the_page_on_cleanrl_follows_the_scripts_schedule():
    """bench/recipe-cleanrl/README.md: the page followed on CleanRL's pqn_atari_envpool.py (with envpool 0.8 and gym,
    and with this project's envpool 1.2.5 after the page's port) and dqn_atari.py (gymnasium 1.x), run with the
    page's short-run commands. Every logged L (B) is what abs_pqn_atari.py's (abs_btr.py's) schedule gives for the
    logged divergences, at the steps the page's K, W and offsets give, and L (B) moved in each run."""
    record = RECORD.read_text(encoding="utf-8")
    assert re.search(r"CleanRL commit `[0-9a-f]{40}`", record)
    page = PAGE.read_text(encoding="utf-8")
    commands = re.findall(r"^    (python cleanrl/\S+\.py .*?)(?<!\\)$", re.sub(r"\\\n\s+", "", page), re.M)
    assert len(commands) == 2 and all(c in re.sub(r"\\\n\s+", "", record) for c in commands), commands
    tables = record_tables()
    pqn_tables = [rows for columns, rows in tables if "adapt/num_steps" in columns]
    dqn_tables = [rows for columns, rows in tables if "adapt/num_steps" not in columns]
    assert len(pqn_tables) == 2 and len(dqn_tables) == 1
    E, K, W = 8, 2, 2  # --num-envs 8 --adapt-freq 2 --window 2, L in [16, 64], CleanRL's 4 minibatches
    for rows in pqn_tables:
        script = pqn.ABSScheduler(16, 64, W, 0.1, 0.05, 0.95, "log", None)
        steps, iteration, rows_left = 0, 0, list(rows)
        while rows_left:
            L = script.num_steps
            steps += L * E
            if pqn.measures_in(iteration, K):
                row = rows_left.pop(0)
                assert row["global step"] == steps
                script.update(row["adapt/divergence"])
                assert row["adapt/divergence_mean"] == pytest.approx(script.delta_bar, rel=1e-6)
                assert row["adapt/num_steps"] == script.num_steps
                assert row["adapt/batch_size"] == script.num_steps * E
                assert row["adapt/update_epochs"] == pqn.update_epochs_for(script.num_steps, 2, 32)
            iteration += 1
        lengths = [row["adapt/num_steps"] for row in rows]
        assert lengths[0] == 16 and lengths[W - 1] > 16 and len(set(lengths)) >= 3, lengths
    assert pqn_tables[0] == pqn_tables[1]  # both envpools, the same run
    (rows,) = dqn_tables  # --learning-starts 10000 --adapt-freq 250 --window 2, CleanRL's 1,000 and 4
    script, choice = btr.ABSScheduler(128, 512, W, 0.1, 0.05, 0.95, "log", None), btr.Args()
    offset, span = btr.measurement_offset(None, 1000 // 4), 8
    assert choice.adapt and choice.batch_size_multiple == 32
    for j, row in enumerate(rows):
        assert row["global step"] == 10000 + 4 * (offset + 250 * j + span)
        script.update(row["adapt/divergence"])
        assert row["adapt/divergence_mean"] == pytest.approx(script.delta_bar, rel=1e-6)
        assert row["adapt/batch_size"] == btr.batch_size_of(script, choice)
    assert rows[0]["adapt/batch_size"] == 128 < rows[W - 1]["adapt/batch_size"]
