"""Tests of abs_ppo_mujoco.py: the KL and delta_ESS, the schedule, the epoch rule, and tiny end-to-end runs on
MuJoCo.

The end-to-end runs are subprocesses with tiny settings (InvertedPendulum-v5, a few thousand steps).
`-m learning` runs the slow learning check (InvertedPendulum-v5, 200k steps, mean eval return >= 900). What every
script shares (bad input, SIGTERM and resume, the non-finite stop, --help) is tested in tests/test_runs_all_scripts.py,
with this script's own BAD_INPUTS below.
"""
import copy
import importlib.util
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Independent, Normal, kl_divergence

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "abs_ppo_mujoco.py"
sys.path.insert(0, str(ROOT))  # the script imports abs_utils beside it
_spec = importlib.util.spec_from_file_location("abs_ppo_mujoco", SCRIPT)
ppo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ppo)

ENV = "InvertedPendulum-v5"
TINY = [*SCRIPTS["abs_ppo_mujoco.py"].adaptive, *CPU]  # on ENV, L in [64, 256] moving, 2000 steps, 2 episodes
TAGS = ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
        "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl", "losses/approx_kl",
        "losses/clipfrac", "losses/explained_variance",
        "perf/env_seconds", "perf/inference_seconds", "perf/update_seconds", "perf/adapt_seconds"]
ADAPT_TAGS = ["adapt/kl", "adapt/kl_mean", "adapt/num_steps", "adapt/batch_size", "adapt/update_epochs"]


def run_script(args, timeout=300, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return preloaded.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                         env=env, **kwargs)


def scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ---------------------------------------------------------------- the KL
def random_gaussians(n=64, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)

    def mean():
        return torch.randn(n, d, generator=g, dtype=torch.float64)

    def std():
        return torch.rand(n, d, generator=g, dtype=torch.float64) * 2.0 + 0.1

    return mean(), std(), mean(), std()


def test_gaussian_kl_matches_torch():
    m_new, s_new, m_old, s_old = random_gaussians()
    ours = ppo.gaussian_kl(m_new, s_new, m_old, s_old)
    ref = kl_divergence(Independent(Normal(m_new, s_new), 1), Independent(Normal(m_old, s_old), 1))
    assert ours.shape == (64,)
    torch.testing.assert_close(ours, ref)


def test_gaussian_kl_zero_for_equal_and_nonnegative():
    m, s, _, _ = random_gaussians(seed=1)
    torch.testing.assert_close(ppo.gaussian_kl(m, s, m, s), torch.zeros(64, dtype=torch.float64))
    assert (ppo.gaussian_kl(*random_gaussians(seed=2)) >= 0).all()


def test_gaussian_kl_direction_is_new_to_old():
    # One dim: new = N(0, 1), old = N(0, 2^2). KL(new||old) = log 2 + 1/8 - 1/2; KL(old||new) = -log 2 + 2 - 1/2.
    m, s_new, s_old = torch.zeros(1, 1), torch.ones(1, 1), torch.full((1, 1), 2.0)
    forward = ppo.gaussian_kl(m, s_new, m, s_old).item()
    assert forward == pytest.approx(math.log(2) + 1 / 8 - 1 / 2)
    assert ppo.gaussian_kl(m, s_old, m, s_new).item() == pytest.approx(-math.log(2) + 2 - 1 / 2)
    m_new, s_new, m_old, s_old = random_gaussians(seed=3)
    p_new, p_old = Independent(Normal(m_new, s_new), 1), Independent(Normal(m_old, s_old), 1)
    ours = ppo.gaussian_kl(m_new, s_new, m_old, s_old)
    torch.testing.assert_close(ours, kl_divergence(p_new, p_old))
    assert not torch.allclose(ours, kl_divergence(p_old, p_new))


def test_behavioral_divergence_of_agents():
    torch.manual_seed(0)
    agent = ppo.Agent(4, 2)
    old = copy.deepcopy(agent)
    states = torch.randn(100, 4)
    assert ppo.behavioral_divergence(agent, old, states) == pytest.approx(0.0, abs=1e-7)
    with torch.no_grad():
        agent.actor_logstd += 0.3
        agent.actor_mean[-1].bias += 0.5
    m_new, s_new = agent.policy(states)
    m_old, s_old = old.policy(states)
    expected = kl_divergence(Independent(Normal(m_new, s_new), 1), Independent(Normal(m_old, s_old), 1)).mean().item()
    assert ppo.behavioral_divergence(agent, old, states) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------- delta_ESS = 1 - ESS/n of the policy ratios
def direct_ess_divergence(log_ratios):
    """The formula written out on the weights themselves (float64; overflows where the log-space one does not)."""
    w = np.exp(np.asarray(log_ratios, dtype=np.float64))
    return 1.0 - w.sum() ** 2 / (len(w) * (w ** 2).sum())


def test_ess_divergence_hand_examples():
    assert ppo.ess_divergence(torch.full((50,), 0.7, dtype=torch.float64)) == pytest.approx(0.0, abs=1e-12)
    assert ppo.ess_divergence(torch.zeros(8)) == 0.0  # the policy did not move (and not -0.0)
    assert ppo.ess_divergence(torch.zeros(1)) == 0.0  # one sample has ESS 1 of 1
    # w = 1, 2, 3, 2: sum 8, sum of squares 1 + 4 + 9 + 4 = 18, ESS/n = 8^2 / (4 * 18) = 8/9, delta = 1/9.
    assert ppo.ess_divergence(np.log([1.0, 2.0, 3.0, 2.0])) == pytest.approx(1 / 9, rel=1e-12)
    # w = 1, 4, 1: ESS/n = 36 / (3 * 18) = 2/3, delta = 1/3.
    assert ppo.ess_divergence(torch.log(torch.tensor([1.0, 4.0, 1.0], dtype=torch.float64))) == pytest.approx(1 / 3)
    # One ratio dominates: ESS -> 1 of n.
    n = 100
    dominant = ppo.ess_divergence(torch.tensor([0.0] * (n - 1) + [30.0], dtype=torch.float64))
    assert dominant == pytest.approx(1 - 1 / n, abs=1e-9) and dominant < 1 - 1 / n
    rng = np.random.default_rng(0)
    lw = rng.normal(0.0, 0.5, size=200)
    assert ppo.ess_divergence(lw) == pytest.approx(direct_ess_divergence(lw), rel=1e-12)
    assert isinstance(ppo.ess_divergence(lw), float)


def test_ess_divergence_is_invariant_to_scaling_every_ratio():
    lw = np.random.default_rng(1).normal(0.0, 1.0, size=64)
    base = ppo.ess_divergence(lw)
    assert 0.0 < base < 1.0
    for shift in (-40.0, -3.0, 2.5, 45.0, 700.0):  # w -> w * e^shift; e^700 overflows in float32 and nearly in float64
        assert ppo.ess_divergence(lw + shift) == pytest.approx(base, rel=1e-9)


def test_ess_divergence_is_stable_for_large_log_ratios():
    # +-50: the weights reach e^50 (e^100 squared), finite in float64, where the direct formula is the reference.
    assert ppo.ess_divergence([-50.0, 50.0, 50.0, -50.0]) == pytest.approx(0.5, rel=1e-12)  # two of four count
    rng = np.random.default_rng(2)
    for lw in (rng.uniform(-50.0, 50.0, size=1000), rng.normal(0.0, 20.0, size=500).clip(-50, 50),
               np.array([50.0] * 3 + [-50.0] * 997), np.array([-50.0] * 10)):
        ours, direct = ppo.ess_divergence(lw), direct_ess_divergence(lw)
        assert math.isfinite(direct) and math.isfinite(ours) and 0.0 <= ours <= 1.0
        assert ours == pytest.approx(direct, rel=1e-9, abs=1e-12)
    # float32 log ratios are computed in float64: the same as the float64 copy of the same numbers.
    lw32 = torch.tensor(rng.uniform(-50.0, 50.0, size=300), dtype=torch.float32)
    assert ppo.ess_divergence(lw32) == ppo.ess_divergence(lw32.double())
    # Far beyond: the direct formula overflows (inf / inf), the log-space one does not.
    with np.errstate(over="ignore", invalid="ignore"):
        assert not math.isfinite(direct_ess_divergence([0.0, 800.0]))
    assert ppo.ess_divergence([0.0, 800.0]) == pytest.approx(0.5)  # w = 1, e^800: ESS 1 of 2
    assert ppo.ess_divergence([-1000.0, 1000.0, 0.0]) == pytest.approx(2 / 3)
    assert 0.0 <= ppo.ess_divergence(rng.uniform(-1e4, 1e4, size=100)) <= 1.0
    # A NaN log-ratio is undefined, never 0 ("the policy did not move", which would push L to L_max).
    assert math.isnan(ppo.ess_divergence([float("nan"), 0.0, 1.0]))
    assert ppo.ess_divergence([-math.inf, 0.0]) == pytest.approx(0.5)  # a zero weight: one of two counts


def perturbed_agents(seed=0, size=1.0):
    torch.manual_seed(seed)
    new = ppo.Agent(4, 2)
    old = copy.deepcopy(new)
    with torch.no_grad():
        new.actor_logstd += size * torch.tensor([[0.2, -0.1]])
        new.actor_mean[-1].bias += size * torch.tensor([0.3, -0.2])
    return new, old


def test_policy_divergences_against_torch_normal():
    new, old = perturbed_agents()
    states = torch.randn(300, 4)
    with torch.no_grad():
        actions = old.get_action_and_value(states)[0]  # the old policy acts, as in the measured rollout
        m_new, s_new = (x.double() for x in new.policy(states))
        m_old, s_old = (x.double() for x in old.policy(states))
    log_w = Normal(m_new, s_new).log_prob(actions.double()).sum(-1) - Normal(m_old, s_old).log_prob(
        actions.double()).sum(-1)
    w = log_w.exp()
    expected_ess = (1.0 - w.sum() ** 2 / (len(w) * (w ** 2).sum())).item()
    expected_kl = kl_divergence(Independent(Normal(m_new, s_new), 1), Independent(Normal(m_old, s_old), 1)).mean()
    torch.testing.assert_close(ppo.gaussian_log_ratio(actions, m_new, s_new, m_old, s_old), log_w)
    kl, ess = ppo.policy_divergences(new, old, states, actions)
    assert kl == pytest.approx(expected_kl.item(), rel=1e-5)
    assert kl == ppo.behavioral_divergence(new, old, states)  # the paper's KL, unchanged
    assert ess == pytest.approx(expected_ess, rel=1e-9) and 0.0 < ess < 1.0
    same = copy.deepcopy(old)
    kl0, ess0 = ppo.policy_divergences(same, old, states, actions)
    assert kl0 == pytest.approx(0.0, abs=1e-7) and ess0 == pytest.approx(0.0, abs=1e-12)


def test_ess_divergence_is_about_twice_the_kl_for_a_small_change():
    # Why --ess-low/--ess-high are twice the KL bounds: delta_ESS ~ chi^2 ~ 2 KL (measured 1.9-2.0 on MuJoCo tasks).
    new, old = perturbed_agents(2, size=0.1)
    states = torch.randn(20_000, 4)
    with torch.no_grad():
        actions = old.get_action_and_value(states)[0]
    kl, ess = ppo.policy_divergences(new, old, states, actions)
    assert 1e-3 < kl < 1e-2 and ess / kl == pytest.approx(2.0, rel=0.2)


def test_ess_divergence_exceeds_twice_the_kl_when_few_states_carry_the_change():
    # A shift of the mean alone: E[w^2 | s] = exp(2 KL_s), so chi^2 = E_s[exp(2 KL_s)] - 1 and delta_ESS tends to
    # chi^2 / (1 + chi^2): just under 2 KL when every state moves a little, more when a few states move a lot
    # (README "Beyond the paper": Humanoid-v4).
    gen = torch.Generator().manual_seed(0)
    n, std = 400_000, torch.ones(400_000, 1, dtype=torch.float64)
    mean_old = torch.zeros(n, 1, dtype=torch.float64)
    actions = torch.randn(n, 1, generator=gen, dtype=torch.float64)  # drawn from the old policy N(0, 1)
    ratios = []
    for share, shift, chi2 in ((1.0, 0.05 ** 0.5, math.expm1(0.05)),  # KL 0.025 in every state
                               (0.05, 1.0, 0.05 * math.expm1(1.0))):  # KL 0.5 on 5% of the states, 0 elsewhere
        mean_new = torch.where(torch.arange(n)[:, None] < share * n, shift, 0.0).double()
        kl = ppo.gaussian_kl(mean_new, std, mean_old, std).mean().item()
        ess = ppo.ess_divergence(ppo.gaussian_log_ratio(actions, mean_new, std, mean_old, std))
        assert kl == pytest.approx(0.025)
        assert ess == pytest.approx(chi2 / (1.0 + chi2), rel=0.03)
        ratios.append(ess / kl)
    assert ratios[0] == pytest.approx(1.95, abs=0.06) and ratios[1] == pytest.approx(3.16, abs=0.1)


def test_policy_divergences_runs_each_policy_once():
    new, old = perturbed_agents(1)
    calls = []
    for name, agent in (("new", new), ("old", old)):
        forward = agent.policy
        agent.policy = lambda x, forward=forward, name=name: calls.append(name) or forward(x)
    states = torch.randn(20, 4)
    actions = torch.randn(20, 2)
    ppo.policy_divergences(new, old, states, actions)
    assert sorted(calls) == ["new", "old"]  # no forward pass beyond the KL's


# ---------------------------------------------------------------- the schedule and the epoch rule
# PPO range L in [1024, 8192], KL range [0.01, 0.1], rounded half up to a multiple of 32 (hand-computed):
#   delta >= 0.1 -> 1024; delta <= 0.01 -> 8192
#   delta = 0.02:         alpha = log10(2) = 0.30103, L = 8192 - 0.30103 * 7168 = 6034.22 = 32 * 188.57 -> 6048
#   delta = 0.05:         alpha = log10(5) = 0.69897, L = 3181.78 = 32 * 99.43 -> 3168
#   delta = sqrt(0.001):  alpha = 0.5,                L = 4608 = 32 * 144 -> 4608
@pytest.mark.parametrize("delta, expected", [(0.5, 1024), (0.1, 1024), (0.01, 8192), (0.001, 8192),
                                             (0.02, 6048), (0.05, 3168), (math.sqrt(0.001), 4608)])
def test_schedule_ppo_range_table(delta, expected):
    s = ppo.ABSScheduler(1024, 8192, window=1, beta=1.0, delta_min=0.01, delta_max=0.1, multiple=32)
    assert s.update(delta) == expected
    assert s.num_steps % 32 == 0


def test_schedule_burn_in_ema_and_rounding():
    s = ppo.ABSScheduler(1024, 8192, window=2, beta=0.1, delta_min=0.01, delta_max=0.1, multiple=32)
    assert s.update(0.001) == 1024  # burn-in: one measurement of two
    assert s.L == 1024.0
    assert s.update(0.001) == 1728  # L = 0.9 * 1024 + 0.1 * 8192 = 1740.8 = 32 * 54.4 -> 54 * 32
    assert s.L == pytest.approx(1740.8)
    assert s.update(0.001) == 2400  # L = 0.9 * 1740.8 + 819.2 = 2385.92 = 32 * 74.56 -> 75 * 32
    s.L = 1040.0  # 32 * 32.5: halves go up
    assert s.num_steps == 1056
    state = s.state_dict()
    t = ppo.ABSScheduler(1024, 8192, window=2, beta=0.1, delta_min=0.01, delta_max=0.1, multiple=32)
    t.load_state_dict(state)
    assert (t.L, list(t.history), t.num_measurements, t.num_steps) == (1040.0, [0.001, 0.001], 3, 1056)


def test_schedule_log_vs_linear_and_bounds_not_multiples():
    lin = ppo.ABSScheduler(1024, 8192, window=1, beta=1.0, delta_min=0.01, delta_max=0.1, schedule="linear",
                           multiple=32)
    assert lin.update(0.055) == 4608  # linear midpoint
    # [1000, 1100] holds the multiples 1024..1088: rounding stays inside the range.
    s = ppo.ABSScheduler(1000, 1100, window=1, beta=1.0, delta_min=0.01, delta_max=0.1, multiple=32)
    assert s.num_steps == 1024  # L = 1000 -> 992 would leave the range
    assert s.update(0.001) == 1088  # L = 1100 -> 34.375 * 32 -> 1088
    assert ppo.multiples_in(1000, 1100, 32) == (1024, 1088)


@pytest.mark.parametrize("L, expected", [(1024, 5), (2048, 10), (3072, 15), (4096, 20), (8192, 40), (1126, 5),
                                         (1127, 6), (100, 1), (1, 1)])
def test_epoch_rule_ppo(L, expected):
    # max(1, round_half_up(10 * L / 2048)); 10 * 1126 / 2048 = 5.498, 10 * 1127 / 2048 = 5.503
    assert ppo.update_epochs_for(L, 10, 2048) == expected


def test_epoch_rule_rounds_half_up_and_floor():
    assert ppo.update_epochs_for(1, 10, 4) == 3  # 2.5 -> 3
    assert ppo.update_epochs_for(100, 10, 2048, min_epochs=2) == 2
    assert ppo.round_half_up(0.5) == 1 and ppo.round_half_up(1.49) == 1


def test_gae_hand_example():
    # gamma = lambda = 0.5; the episode ends after t=1 (no bootstrap across it).
    rewards = torch.ones(3, 1)
    values = torch.zeros(3, 1)
    dones = torch.tensor([[0.0], [1.0], [0.0]])
    adv = ppo.gae(rewards, values, dones, torch.tensor([2.0]), 0.5, 0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.25], [1.0], [2.0]]))


def test_rollout_storage_is_named_tensors_at_L_max():
    rollout = ppo.Rollout.allocate(256, 2, 11, 3, "cpu")
    assert rollout.obs.shape == (256, 2, 11) and rollout.actions.shape == (256, 2, 3)
    assert all(getattr(rollout, name).shape == (256, 2) for name in ("logprobs", "rewards", "dones", "values"))
    assert all(t.dtype == torch.float32 and not t.any() for t in vars(rollout).values())
    # The flag check estimates the storage on the meta device, allocating nothing: the same bytes.
    assert rollout.nbytes == 256 * 2 * (11 + 3 + 4) * 4 == ppo.Rollout.allocate(256, 2, 11, 3, "meta").nbytes


def test_mujoco_dims_are_the_envs_sizes_and_none_for_ids_that_cannot_be_made():
    assert ppo.mujoco_dims("Hopper-v4") == (11, 3) and ppo.mujoco_dims("HalfCheetah-v5") == (17, 6)
    for env_id in ("HalfCheetah-v3", "Hopper-v2", "CartPole-v1", "Pendulum-v1", "NoSuchEnv-v0"):
        assert ppo.mujoco_dims(env_id) is None, env_id  # v2/v3 are registered but need mujoco-py


# ---------------------------------------------------------------- environments and normalisation
def test_normalization_shared_and_restored():
    envs = ppo.make_envs(ENV, 2, 0.99)
    envs.reset(seed=0)
    for _ in range(20):
        envs.step(envs.action_space.sample())
    find = ppo.find_wrapper
    NormObs = ppo.gym.wrappers.NormalizeObservation
    assert find(envs.envs[0], NormObs).obs_rms is find(envs.envs[1], NormObs).obs_rms
    state = ppo.normalization_state(envs)
    assert state["obs_rms"]["count"] > 40  # both envs update the one set of statistics
    fresh = ppo.make_envs(ENV, 2, 0.99)
    ppo.set_normalization_state(fresh, state)
    again = ppo.normalization_state(fresh)
    np.testing.assert_array_equal(again["obs_rms"]["mean"], state["obs_rms"]["mean"])
    np.testing.assert_array_equal(again["obs_rms"]["var"], state["obs_rms"]["var"])
    assert again["return_rms"]["count"] == state["return_rms"]["count"]
    np.testing.assert_array_equal(again["discounted_reward"][1], state["discounted_reward"][1])
    envs.close()
    fresh.close()


def test_evaluate_uses_frozen_statistics(monkeypatch):
    made = []
    make_env = ppo.make_env
    monkeypatch.setattr(ppo, "make_env", lambda *a, **k: made.append(make_env(*a, **k)) or made[-1])
    torch.manual_seed(0)
    agent = ppo.Agent(4, 1)
    obs_rms = {"mean": np.array([0.1, -0.2, 0.0, 0.3]), "var": np.array([0.5, 2.0, 1.0, 3.0]), "count": 123.0}
    first = ppo.evaluate(agent, ENV, 2, obs_rms, seed=5, device=torch.device("cpu"))
    assert len(first[0]) == 2 and sum(first[1]) > 2
    # The evaluation env's own statistics are the given ones and were not updated by its episodes' observations.
    rms = ppo.find_wrapper(made[-1], gym.wrappers.NormalizeObservation).obs_rms
    assert rms.count == 123.0
    np.testing.assert_array_equal(rms.mean, obs_rms["mean"])
    np.testing.assert_array_equal(rms.var, obs_rms["var"])
    assert ppo.evaluate(agent, ENV, 2, obs_rms, seed=5, device=torch.device("cpu")) == first  # deterministic
    other = {**obs_rms, "mean": obs_rms["mean"] + 1.0}  # the statistics are applied: other ones act differently
    assert ppo.evaluate(agent, ENV, 2, other, seed=5, device=torch.device("cpu"))[0] != first[0]


# ---------------------------------------------------------------- flags
def test_divergence_flags_parse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default, _ = ppo.parse_args([])
    assert default.divergence == "kl" and 0 < default.ess_low < default.ess_high <= 1  # the paper's KL by default
    args, _ = ppo.parse_args(["--divergence", "ess", "--ess-low", "0.05", "--ess-high", "1"])  # 1 is in the domain
    assert (args.divergence, args.ess_low, args.ess_high) == ("ess", 0.05, 1.0)
    assert "divergence" not in ppo.RUN_CONTROL_FLAGS  # it changes the schedule: a --resume keeps the checkpoint's
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- end-to-end runs
def grid_mujoco_ids():
    import tomllib

    with open(ROOT / "reproduce" / "experiments.toml", "rb") as f:
        return tomllib.load(f)["games"]["mujoco"]


@pytest.mark.filterwarnings("ignore:.*is out of date")
def test_grid_runs_the_papers_v4_tasks_and_they_step():
    ids = grid_mujoco_ids()
    assert ids == ["HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4"]
    assert ppo.Args().env_id == "HalfCheetah-v4"
    dims = {}
    for env_id in ids:
        env = ppo.make_env(env_id, gamma=0.99)
        obs, _ = env.reset(seed=0)
        obs, reward, term, trunc, _ = env.step(env.action_space.sample())
        dims[env_id] = obs.shape[0]
        assert np.isfinite(obs).all() and np.isfinite(reward)
        env.close()
    # v4's observations (v5's Ant has 105 dimensions: contact forces are always included there).
    assert dims == {"HalfCheetah-v4": 17, "Hopper-v4": 11, "Walker2d-v4": 17, "Ant-v4": 27, "Humanoid-v4": 376}


@pytest.mark.filterwarnings("ignore:.*is out of date")
def test_end_to_end_on_a_v4_task(tmp_path):
    r = run_script(["--env-id", "Hopper-v4", "--num-steps-min", "64", "--num-steps-max", "256", "--num-minibatches",
                    "4", "--adapt-freq", "1", "--window", "2", "--total-timesteps", "1000", "--eval-episodes", "1",
                    "--no-cuda", "--log-every-seconds", "0", "--checkpoint-every", "0", "--output-dir", str(tmp_path),
                    "--run-name", "hopper"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    res = json.loads((tmp_path / "hopper" / "eval_results.json").read_text())
    assert res["env_id"] == "Hopper-v4" and res["global_step"] >= 1000 and res["eval"]["episodes"] == 1
    assert np.isfinite(res["eval"]["mean"]) and 0 < res["eval"]["lengths"][0] <= 1000


def test_a_v4_run_leaves_no_mujoco_log_in_the_working_directory_and_no_notice_on_stderr(tmp_path):
    """MuJoCo's default handler appends the -v4 XML's 'settotalmass' deprecation to MUJOCO_LOG.TXT in the current
    directory, and gymnasium warns that -v4 is out of date: the project runs v4 on purpose, so neither appears."""
    r = run_script(["--env-id", "HalfCheetah-v4", "--num-steps-min", "64", "--num-steps-max", "64", "--num-minibatches",
                    "2", "--total-timesteps", "128", "--eval-episodes", "1", "--no-cuda", "--output-dir", "out",
                    "--run-name", "cheetah"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert sorted(os.listdir(tmp_path)) == ["out"] and not list(tmp_path.rglob("MUJOCO_LOG.TXT"))
    assert "out of date" not in r.stderr and "settotalmass" not in r.stdout + r.stderr, r.stderr
    assert (tmp_path / "out" / "cheetah" / "eval_results.json").exists()


def test_other_mujoco_warnings_still_reach_stderr(capsys):
    ppo.mujoco_warning("Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.")
    ppo.mujoco_warning("compiler attribute 'settotalmass' is deprecated and will be removed in a future release")
    assert capsys.readouterr().err == "warning: MuJoCo: Nan, Inf or huge value in QACC at DOF 0. The simulation is " \
                                      "unstable.\n"


@pytest.fixture(scope="module")
def abs_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("abs")
    r = run_script([*TINY, "--output-dir", str(out), "--run-name", "abs"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return out / "abs", r


def test_end_to_end_abs_results_json(abs_run):
    run_dir, _ = abs_run
    res = json.loads((run_dir / "eval_results.json").read_text())
    assert res["algo"] == "abs_ppo_mujoco" and res["env_id"] == ENV and res["seed"] == 1 and res["run_name"] == "abs"
    assert res["global_step"] >= 2000 and res["total_timesteps"] == 2000 and res["train_seconds"] > 0
    ev = res["eval"]
    assert ev["episodes"] == 2 and len(ev["returns"]) == 2 and len(ev["lengths"]) == 2
    assert set(ev) == {"episodes", "returns", "lengths", "mean", "std", "median", "min", "max", "capped"}
    assert ev["mean"] == pytest.approx(np.mean(ev["returns"])) and ev["capped"] == 0
    assert res["args"]["adapt"] is True and res["args"]["num_minibatches"] == 4 and res["args"]["kl_low"] == 0.01
    assert (run_dir / "checkpoint.pt").is_file()


def test_end_to_end_abs_tensorboard_and_L(abs_run):
    run_dir, r = abs_run
    sc = scalars(run_dir)
    missing = [t for t in TAGS + ADAPT_TAGS if t not in sc]
    assert not missing, missing
    steps = {tag: [s for s, _ in sc[tag]] for tag in ADAPT_TAGS}
    assert all(steps[tag] == steps["adapt/kl"] for tag in ADAPT_TAGS)  # all at the same global steps
    L = [int(v) for _, v in sc["adapt/num_steps"]]
    assert all(64 <= x <= 256 and x % 4 == 0 for x in L), L
    assert max(L) > 64, L  # L moved away from L_min after the burn-in
    assert L[0] == 64  # burn-in: one measurement of two
    assert [int(v) for _, v in sc["adapt/batch_size"]] == L  # one env
    assert [int(v) for _, v in sc["adapt/update_epochs"]] == [ppo.update_epochs_for(x, 10, 2048) for x in L]
    assert all(v >= 0 for _, v in sc["adapt/kl"])
    lr = [v for _, v in sc["charts/learning_rate"]]
    assert lr[0] == pytest.approx(3e-4) and all(a > b for a, b in zip(lr, lr[1:]))  # annealed by global step
    assert "| L " in r.stdout and "eval: mean" in r.stdout
    # One event per episode at the step where it ended: with one env the episodes tile the steps, so each event's
    # step is the previous one's plus its own length (a per-iteration mean would break this).
    ends = [int(s) for s, _ in sc["charts/episodic_length"]]
    lengths = [int(v) for _, v in sc["charts/episodic_length"]]
    assert len(ends) > 10 and [s for s, _ in sc["charts/episodic_return"]] == ends
    assert np.diff([0, *ends]).tolist() == lengths


def test_measurements_span_the_kth_2kth_iterations_as_the_authors_code():
    assert [i for i in range(12) if ppo.measures_in(i, 4)] == [3, 7, 11]
    assert all(ppo.measures_in(i, 1) for i in range(3))


def test_end_to_end_no_adapt_track_divergence(tmp_path):
    r = run_script([*TINY, "--no-adapt", "--num-steps", "128", "--track-divergence", "--output-dir", str(tmp_path),
                    "--run-name", "fixed"])
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads((tmp_path / "fixed" / "eval_results.json").read_text())
    assert res["args"]["adapt"] is False and res["global_step"] == 2048  # 16 iterations of 128 steps
    sc = scalars(tmp_path / "fixed")
    assert {int(v) for _, v in sc["adapt/num_steps"]} == {128}  # measured and logged, never adapted
    assert len(sc["adapt/kl"]) == 16
    assert "losses/approx_kl" in sc
    ckpt = torch.load(tmp_path / "fixed" / "checkpoint.pt", weights_only=False)
    assert ckpt["scheduler"]["num_measurements"] == 16 and ckpt["scheduler"]["L"] == 128


def test_end_to_end_kl_mode_also_logs_ess(abs_run):
    run_dir, r = abs_run
    sc = scalars(run_dir)
    assert [s for s, _ in sc["adapt/divergence_ess"]] == [s for s, _ in sc["adapt/kl"]]
    assert all(0.0 <= v <= 1.0 for _, v in sc["adapt/divergence_ess"])
    assert "adapt/divergence_ess_mean" not in sc  # the window mean is the KL's, adapt/kl_mean
    assert "| kl_bar " in r.stdout and "ess_bar" not in r.stdout


# Bounds around the tiny run's delta_ESS (about 1e-4 on InvertedPendulum), so that the log interpolation is used.
ESS_BOUNDS = ["--ess-low", "0.00005", "--ess-high", "0.001"]


@pytest.fixture(scope="module")
def ess_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ess")
    r = run_script([*TINY, "--divergence", "ess", *ESS_BOUNDS, "--output-dir", str(out), "--run-name", "ess"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return out / "ess", r


def test_end_to_end_ess_logs_both_divergences(ess_run):
    run_dir, r = ess_run
    res = json.loads((run_dir / "eval_results.json").read_text())
    assert res["args"]["divergence"] == "ess" and (res["args"]["ess_low"], res["args"]["ess_high"]) == (5e-5, 1e-3)
    sc = scalars(run_dir)
    tags = ["adapt/kl", "adapt/divergence_ess", "adapt/divergence_ess_mean", "adapt/num_steps", "adapt/batch_size",
            "adapt/update_epochs"]
    assert all(t in sc for t in tags) and "adapt/kl_mean" not in sc
    steps = [s for s, _ in sc["adapt/kl"]]
    assert len(steps) > 5 and all([s for s, _ in sc[t]] == steps for t in tags)  # at the same global steps
    ess = [v for _, v in sc["adapt/divergence_ess"]]
    assert all(0.0 < v < 1.0 for v in ess) and all(v >= 0.0 for _, v in sc["adapt/kl"])
    # The logged window mean is the mean of the last W = 2 logged deltas (float32 in the event file).
    means = [v for _, v in sc["adapt/divergence_ess_mean"]]
    assert means == pytest.approx([np.mean(ess[max(0, i - 1): i + 1]) for i in range(len(ess))], rel=1e-5)
    assert "| ess_bar " in r.stdout and "kl_bar" not in r.stdout


def test_end_to_end_ess_schedule_follows_the_logged_deltas(ess_run):
    run_dir, _ = ess_run
    sc = scalars(run_dir)
    ess = [v for _, v in sc["adapt/divergence_ess"]]
    L = [int(v) for _, v in sc["adapt/num_steps"]]
    # Replay the logged deltas through the script's scheduler with TINY's settings: L in [64, 256], W = 2,
    # beta 0.1 (default), log schedule, L rounded to a multiple of 4 minibatches. (The logged deltas are float32,
    # far from moving L across a rounding boundary.)
    replay = ppo.ABSScheduler(64, 256, window=2, beta=0.1, delta_min=5e-5, delta_max=1e-3, schedule="log", multiple=4)
    assert [replay.update(d) for d in ess] == L
    assert L[0] == 64 and max(L) > 64 and all(x % 4 == 0 for x in L)
    # The first step after the burn-in by hand: target = 256 - alpha * (256 - 64) with alpha the log position of the
    # window mean between the bounds, EMA from L_min = 64, then rounded half up to a multiple of 4.
    d_bar = (ess[0] + ess[1]) / 2
    clipped = min(max(d_bar, 5e-5), 1e-3)
    alpha = math.log(clipped / 5e-5) / math.log(1e-3 / 5e-5)
    L1 = 0.9 * 64 + 0.1 * (256 - alpha * 192)
    assert L[1] == 4 * math.floor(L1 / 4 + 0.5)
    inside = [np.mean(ess[max(0, i - 1): i + 1]) for i in range(1, len(ess))]
    assert any(5e-5 < m < 1e-3 for m in inside), inside  # the interpolation, not only the bounds, was used
    assert [int(v) for _, v in sc["adapt/update_epochs"]] == [ppo.update_epochs_for(x, 10, 2048) for x in L]


def test_end_to_end_no_adapt_track_divergence_logs_both(tmp_path):
    r = run_script([*TINY, "--no-adapt", "--num-steps", "128", "--track-divergence", "--divergence", "ess",
                    "--total-timesteps", "1024", "--eval-episodes", "0", "--output-dir", str(tmp_path),
                    "--run-name", "fixed"])
    assert r.returncode == 0, r.stderr[-4000:]
    sc = scalars(tmp_path / "fixed")
    assert {int(v) for _, v in sc["adapt/num_steps"]} == {128}  # measured and logged, never adapted
    steps = [s for s, _ in sc["adapt/kl"]]
    assert len(steps) == 8 and [s for s, _ in sc["adapt/divergence_ess"]] == steps
    assert [s for s, _ in sc["adapt/divergence_ess_mean"]] == steps and "adapt/kl_mean" not in sc


def test_a_non_finite_loss_from_the_entropy_weight_names_it_not_only_the_learning_rate(tmp_path):
    # --ent-coef 1e38 makes the loss overflow float32 at the default learning rate: the line names every flag that
    # scales the loss or its steps, with its value, and does not point at --learning-rate alone.
    p = run_script([*TINY, "--ent-coef", "1e38", "--output-dir", str(tmp_path), "--run-name", "nan"])
    assert p.returncode == 3, p.stdout[-1000:] + p.stderr[-1000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("Start again with lower values of the flags that scale the loss or "
                                                 "its steps (--learning-rate 0.0003, --ent-coef 1e+38, --vf-coef 0.5, "
                                                 "--max-grad-norm 0.5)."), lines


def test_resume_continues_steps_and_normalisation(abs_run, tmp_path):
    run_dir, _ = abs_run
    copy_dir = tmp_path / "abs"
    shutil.copytree(run_dir, copy_dir)
    first = torch.load(copy_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    first_step, first_count = first["global_step"], first["normalization"]["obs_rms"]["count"]
    assert first_count > first_step  # every observation (plus the reset ones) went into the statistics
    r = run_script(["--resume", str(copy_dir / "checkpoint.pt"), "--total-timesteps", "3000", "--extend-schedules",
                    "--eval-episodes", "1", "--no-cuda", "--log-every-seconds", "0"])
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"resumed {copy_dir / 'checkpoint.pt'} at global_step {first_step}" in r.stdout
    assert f"from {first_count:.0f} observations" in r.stdout
    res = json.loads((copy_dir / "eval_results.json").read_text())
    assert res["global_step"] >= 3000 and res["total_timesteps"] == 3000 and res["eval"]["episodes"] == 1
    assert res["args"]["num_steps_min"] == 64 and res["args"]["window"] == 2  # algorithm flags from the checkpoint
    second = torch.load(copy_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    # Restored statistics keep counting: the count covers the first run's observations too.
    assert second["normalization"]["obs_rms"]["count"] >= first_count + (res["global_step"] - first_step)
    assert second["scheduler"]["num_measurements"] > first["scheduler"]["num_measurements"]
    sps_steps = [s for s, _ in scalars(copy_dir)["charts/SPS"]]
    assert sps_steps == sorted(set(sps_steps)) and sps_steps[-1] == res["global_step"]
    assert any(s > first_step for s in sps_steps)
    sums = [v for _, v in scalars(copy_dir)["perf/update_seconds"]]  # carried across the resume, not restarted at 0
    assert sums == sorted(sums) and sums[-1] == pytest.approx(second["perf"]["update"])
    assert second["perf"]["update"] > first["perf"]["update"] > 0


# ---------------------------------------------------------------- learning check (slow: pytest -m learning)
@pytest.mark.learning
def test_learning_inverted_pendulum(tmp_path):
    start = time.time()
    r = run_script(["--env-id", ENV, "--seed", "1", "--total-timesteps", "200000", "--no-cuda",
                    "--output-dir", str(tmp_path), "--run-name", "learn"], timeout=3 * 3600)
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads((tmp_path / "learn" / "eval_results.json").read_text())
    print(f"learning check: eval mean {res['eval']['mean']:.1f} in {time.time() - start:.0f} s")
    assert res["global_step"] <= 200_000 + 8192 and res["eval"]["mean"] >= 900, res["eval"]


# ---------------------------------------------------------------- bad input
# This script's own flag checks (flag_problems): (argv, what the one error line must name), each run by
# tests/test_runs_all_scripts.py on a valid run of 8 steps.
BAD_INPUTS = [
    (["--checkpoint-every", "-1"], "--checkpoint-every"), (["--log-every-seconds", "-1"], "--log-every-seconds"),
    (["--total-timesteps", "0"], "--total-timesteps"), (["--learning-rate", "-1"], "--learning-rate"),
    (["--learning-rate", "0"], "--learning-rate"), (["--num-envs", "0"], "--num-envs"),
    (["--num-minibatches", "0"], "--num-minibatches"), (["--gamma", "1.5"], "--gamma"), (["--gamma", "0"], "--gamma"),
    (["--gae-lambda", "-0.1"], "--gae-lambda"), (["--gae-lambda", "1.1"], "--gae-lambda"),
    (["--clip-coef", "0"], "--clip-coef"), (["--ent-coef", "-0.1"], "--ent-coef"), (["--vf-coef", "-1"], "--vf-coef"),
    (["--max-grad-norm", "0"], "--max-grad-norm"), (["--num-steps", "0"], "--num-steps"),
    (["--num-steps-min", "0"], "--num-steps-min"), (["--num-steps-max", "0"], "--num-steps-max"),
    (["--num-steps-min", "4096", "--num-steps-max", "2048"], "--num-steps-min"),
    (["--num-steps-min", "1025", "--num-steps-max", "1050"], "--num-minibatches"),
    (["--no-adapt", "--num-steps", "100"], "--num-minibatches"),
    (["--num-steps-min", "32", "--num-steps-max", "32"], "--num-minibatches"),  # 1 transition per minibatch
    (["--adapt-freq", "0"], "--adapt-freq"), (["--window", "0"], "--window"), (["--burn-in", "0"], "--burn-in"),
    (["--ema-beta", "0"], "--ema-beta"), (["--ema-beta", "1.5"], "--ema-beta"), (["--kl-low", "0"], "--kl-low"),
    (["--kl-low", "0.2", "--kl-high", "0.1"], "--kl-high"), (["--kl-low", "0.1", "--kl-high", "0.1"], "--kl-low"),
    (["--ref-batch-size", "0"], "--ref-batch-size"),
    (["--divergence", "chi2"], "--divergence"), (["--ess-low", "0"], "--ess-low"), (["--ess-low", "-0.1"], "--ess-low"),
    (["--ess-low", "1.5"], "--ess-low"), (["--ess-high", "0"], "--ess-high"), (["--ess-high", "1.01"], "--ess-high"),
    (["--ess-low", "0.3", "--ess-high", "0.2"], "--ess-high"),
    (["--divergence", "ess", "--ess-low", "0.2", "--ess-high", "0.2"], "--ess-low"),
    (["--update-epochs", "0"], "--update-epochs"), (["--epochs-ref-steps", "0"], "--epochs-ref-steps"),
    (["--min-update-epochs", "0"], "--min-update-epochs"), (["--eval-episodes", "-1"], "--eval-episodes"),
    (["--schedule", "cubic"], "--schedule"), (["--env-id", "Breakout-v5"], "--env-id"),
    (["--env-id", "ALE/Breakout-v5"], "--env-id"), (["--env-id", "CartPole-v1"], "--env-id"),
    (["--env-id", "HalfCheetah-v3"], "--env-id"), (["--env-id", "Hopper-v2"], "--env-id"),  # need mujoco-py
    (["--learning-rate", "1e38"], "--learning-rate"), (["--learning-rate", "4e37"], "--learning-rate"),
    (["--num-steps-max", "10000000000"], "--num-steps-max"),
    (["--no-adapt", "--num-steps", "1000000000"], "--num-steps"),
    (["--update-epochs", "1001"], "--update-epochs"), (["--epochs-ref-steps", "1"], "--epochs-ref-steps"),
    (["--min-update-epochs", "1001"], "--min-update-epochs"),  # the longest update's epochs above 1000
    # the rule gives 501 epochs at L_max = 1024, the burn-in keeps the base 1001
    (["--update-epochs", "1001", "--base-epochs-in-burn-in", "--num-steps-max", "1024"], "--update-epochs"),
]


def test_burn_in_separate_from_the_window_by_hand():
    """--window 20 --burn-in 10 (the authors' code). Linear schedule, beta 1, delta in [0.1, 0.9], L in [16, 64]:
    target = 64 - (d - 0.1) / 0.8 * 48 = 70 - 60 d. Measurements: five 0.8, five 0.5, then 0.2.
    - measurements 1-9: fewer than 10 exist, L stays L_min = 16;
    - the 10th: mean of the 10 = 0.65, target 70 - 39 = 31;
    - the 25th: the last 20 are m6..m25 = five 0.5 and fifteen 0.2, mean 5.5 / 20 = 0.275, target 70 - 16.5 = 53.5,
      rounded half up to 54 (a window of 10 would give 58, the mean of all 25 gives 50.8)."""
    s = ppo.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    deltas = [0.8] * 5 + [0.5] * 5 + [0.2] * 15
    Ls = [s.update(d) for d in deltas]
    assert Ls[:9] == [16] * 9 and s.history.maxlen == 20
    assert Ls[9] == 31
    assert s.L == pytest.approx(53.5) and Ls[24] == 54
    default = ppo.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear")  # default: burn-in until W measurements exist
    assert [default.update(d) for d in deltas][:19] == [16] * 19 and default.burn_in == 20
    s2 = ppo.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    for d in deltas[:12]:
        s2.update(d)
    restored = ppo.ABSScheduler(16, 64, 20, 1.0, 0.1, 0.9, "linear", burn_in=10)
    restored.load_state_dict(s2.state_dict())
    assert [restored.update(d) for d in deltas[12:]] == Ls[12:]  # the burn-in count survives a checkpoint


def test_update_epochs_keep_base_returns_the_base():
    assert ppo.update_epochs_for(1024, 10, 2048, 1) == 5 and ppo.update_epochs_for(1024, 10, 2048, 1, True) == 10
    assert ppo.update_epochs_for(4096, 10, 2048, 1, False) == 20


@pytest.mark.parametrize("base_in_burn_in, L_min", [(False, 64), (True, 64), (True, 62)])
def test_epochs_per_iteration_with_and_without_base_epochs_in_burn_in(tmp_path, base_in_burn_in, L_min):
    """L_min 64, update epochs 8 at ref 128: the rule gives 4 epochs at L = 64. With the flag, 8 until L first leaves
    64 (after the burn-in of 3 measurements), then the rule. Read from the epochs each iteration's update used.
    --num-steps-min 62 is rounded up to 64 (4 minibatches), the L of the burn-in: the flag holds there too."""
    flags = ["--burn-in", "3", "--divergence", "kl", "--kl-low", "10", "--kl-high", "100", "--update-epochs", "8",
             "--epochs-ref-steps", "128", "--total-timesteps", "1500", "--eval-episodes", "0"]
    r = run_script([*TINY, *flags, *(["--base-epochs-in-burn-in"] if base_in_burn_in else []),
                    "--num-steps-min", str(L_min), "--output-dir", str(tmp_path), "--run-name", "e"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    tags = scalars(tmp_path / "e")
    Ls = [int(v) for _, v in tags["adapt/num_steps"]]  # L after each iteration's measurement (--adapt-freq 1)
    epochs = [int(v) for _, v in tags["adapt/update_epochs"]]  # the epochs the next iteration uses
    assert Ls[:2] == [64, 64] and Ls[2] > 64  # burn-in: 3 measurements, the 3rd moves L (tiny KL bounds: L_max)
    rule = [max(1, math.floor(8 * L / 128 + 0.5)) for L in Ls]
    if base_in_burn_in:
        assert epochs[:2] == [8, 8] and epochs[2:] == rule[2:]
    else:
        assert epochs == rule and epochs[:2] == [4, 4]
    ck = torch.load(tmp_path / "e" / "checkpoint.pt", weights_only=True)
    assert ck["L_moved"] is True and ck["args"]["burn_in"] == 3
    assert ck["args"]["base_epochs_in_burn_in"] is base_in_burn_in


def test_base_epochs_in_burn_in_leaves_a_fixed_L_run_to_the_epoch_rule(tmp_path):
    """--no-adapt has no burn-in: the flag changes nothing (4 epochs at L = 64, update epochs 8 at ref 128)."""
    r = run_script([*TINY, "--no-adapt", "--num-steps", "64", "--track-divergence", "--update-epochs", "8",
                    "--epochs-ref-steps", "128", "--total-timesteps", "640", "--eval-episodes", "0",
                    "--base-epochs-in-burn-in", "--output-dir", str(tmp_path), "--run-name", "f"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert {int(v) for _, v in scalars(tmp_path / "f")["adapt/update_epochs"]} == {4}
