"""Tests of abs_ppo_atari.py: the schedule and the epoch rule by hand, the categorical KL and the greedy-action change
against independent computations, CleanRL's initialisation, and real tiny runs on envpool Breakout. What every
script shares (bad input, SIGTERM and resume, the non-finite stop, --help) is tested in
tests/test_runs_all_scripts.py, with this script's own BAD_INPUTS below."""
import copy
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.distributions import Categorical, kl_divergence

import preloaded  # runs the training scripts without their imports' seconds (tests/preloaded.py)
from scripts import CPU, SCRIPTS  # the scripts and their tiny runs (tests/scripts.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abs_ppo_atari as ppo  # noqa: E402

SCRIPT = os.path.join(ROOT, "abs_ppo_atari.py")
# 4 envs, L in [4, 16] moving, 2 short evaluation games (tests/scripts.py)
TINY = [*SCRIPTS["abs_ppo_atari.py"].adaptive, *CPU, "--torch-threads", "1", "--env-threads", "1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(args, tmp_path, timeout=300):
    return preloaded.run([sys.executable, SCRIPT, *args, "--output-dir", str(tmp_path)], capture_output=True,
                         text=True, timeout=timeout, cwd=tmp_path, env=ENV)


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ---------------------------------------------------------------- the schedule and the epoch rule, by hand
# L in [64, 256], KL bounds [0.002, 0.02] (a factor 10: alpha = log10(delta / 0.002)), beta 1, window 1:
#   delta >= 0.02 -> 64; delta <= 0.002 -> 256
#   delta = sqrt(0.002 * 0.02): alpha = 1/2,              L = 256 - 96 = 160
#   delta = 0.004:              alpha = log10 2 = 0.30103, L = 256 - 57.80 = 198.20 -> 198 (multiple 4: 49.55 -> 200)
#   delta = 0.01:               alpha = log10 5 = 0.69897, L = 256 - 134.20 = 121.80 -> 122 (multiple 4: 30.45 -> 120)
@pytest.mark.parametrize("delta, one, four", [(0.5, 64, 64), (0.02, 64, 64), (0.002, 256, 256), (1e-5, 256, 256),
                                              (math.sqrt(0.002 * 0.02), 160, 160), (0.004, 198, 200),
                                              (0.01, 122, 120)])
def test_schedule_table(delta, one, four):
    for multiple, expected in ((1, one), (4, four)):
        s = ppo.ABSScheduler(64, 256, window=1, beta=1.0, delta_min=0.002, delta_max=0.02, multiple=multiple)
        assert s.update(delta) == expected


def test_schedule_burn_in_ema_linear_and_state():
    s = ppo.ABSScheduler(64, 256, window=2, beta=0.1, delta_min=0.002, delta_max=0.02)
    assert s.update(0.001) == 64 and s.L == 64.0  # burn-in: one measurement of two
    assert s.update(0.001) == 83  # 0.9 * 64 + 0.1 * 256 = 83.2
    assert s.update(0.001) == 100  # 0.9 * 83.2 + 25.6 = 100.48
    assert s.L == pytest.approx(100.48)
    t = ppo.ABSScheduler(64, 256, window=2, beta=0.1, delta_min=0.002, delta_max=0.02)
    t.load_state_dict(copy.deepcopy(s.state_dict()))
    assert (t.L, list(t.history), t.num_measurements) == (s.L, [0.001, 0.001], 3)
    assert t.update(0.03) == s.update(0.03)
    lin = ppo.ABSScheduler(64, 256, window=1, beta=1.0, delta_min=0.002, delta_max=0.02, schedule="linear")
    assert lin.update(0.011) == 160  # the linear midpoint
    rec = ppo.ABSScheduler(128, 128, window=2, beta=0.1, delta_min=0.002, delta_max=0.02)
    for d in (0.3, 0.1, 0.2):
        rec.record(d)  # --no-adapt --track-divergence: the window mean is kept, L never moves
    assert rec.num_steps == 128 and rec.delta_bar == pytest.approx(0.15) and rec.num_measurements == 3


@pytest.mark.parametrize("envs, minibatches, multiple", [(8, 4, 1), (1, 4, 4), (2, 8, 4), (6, 4, 2), (4, 32, 8)])
def test_length_multiple_makes_every_batch_split_evenly(envs, minibatches, multiple):
    assert ppo.length_multiple(envs, minibatches) == multiple
    for L in range(1, 100):
        assert ((envs * L) % minibatches == 0) == (L % multiple == 0)


@pytest.mark.parametrize("L, epochs", [(64, 2), (96, 3), (128, 4), (160, 5), (256, 8), (80, 3), (48, 2), (16, 1),
                                       (1, 1)])
def test_epoch_rule(L, epochs):
    # max(1, round_half_up(4 * L / 128)): 80 -> 2.5 -> 3, 48 -> 1.5 -> 2, 16 -> 0.5 -> 1, 1 -> 0.03 -> floor 1
    assert ppo.update_epochs_for(L, 4, 128) == epochs


def test_measurements_span_the_kth_2kth_iterations():
    assert [i for i in range(30) if ppo.measures_in(i, 10)] == [9, 19, 29]


# ---------------------------------------------------------------- the divergences
def test_categorical_kl_against_torch_and_its_direction():
    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(50, 6, generator=g) * 2, torch.randn(50, 6, generator=g) * 2
    expected = kl_divergence(Categorical(logits=new), Categorical(logits=old))
    torch.testing.assert_close(ppo.categorical_kl(new, old), expected)
    assert not torch.allclose(ppo.categorical_kl(new, old), ppo.categorical_kl(old, new))
    assert ppo.categorical_kl(new, new + 3.0).abs().max() < 1e-6  # a shift of every logit leaves the policy alone
    # rounding: unclamped, about a quarter of these rows come out near -1e-7; a KL is never negative
    x = torch.randn(4096, 4, generator=torch.Generator().manual_seed(0)) * 3
    assert (ppo.categorical_kl(x, x + 0.1) >= 0).all()
    # Hand value: new = (1/2, 1/2), old = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3)
    kl = ppo.categorical_kl(torch.log(torch.tensor([[0.5, 0.5]])), torch.log(torch.tensor([[0.25, 0.75]])))
    assert kl.item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    big = torch.tensor([[1000.0, 0.0], [0.0, 1000.0]])  # near-deterministic policies stay finite
    assert torch.isfinite(ppo.categorical_kl(big, big.flip(1))).all()


def test_policy_divergences_of_real_agents_against_numpy():
    torch.manual_seed(0)
    old = ppo.Agent(6)
    new = copy.deepcopy(old)
    with torch.no_grad():
        new.actor.weight.add_(0.02 * torch.randn_like(new.actor.weight))
    states = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        l_new, l_old = new.logits(states).double().numpy(), old.logits(states).double().numpy()
    p_new = np.exp(l_new - l_new.max(1, keepdims=True))
    p_new /= p_new.sum(1, keepdims=True)
    p_old = np.exp(l_old - l_old.max(1, keepdims=True))
    p_old /= p_old.sum(1, keepdims=True)
    expected_kl = float(np.mean((p_new * np.log(p_new / p_old)).sum(1)))
    expected_change = float(np.mean(l_new.argmax(1) != l_old.argmax(1)))
    kl, change = ppo.policy_divergences(new, old, states)
    assert kl == pytest.approx(expected_kl, rel=1e-4) and kl > 0
    assert change == pytest.approx(expected_change) and 0.0 < change < 1.0
    assert ppo.policy_divergences(old, copy.deepcopy(old), states) == (0.0, 0.0)


def test_the_initial_policys_mode_is_one_action_in_every_state():
    """Why the greedy-action change is all or nothing early (docs/ppo-atari.md): CleanRL's initial policy is nearly
    uniform and its mode is the same action on every state of a real Breakout rollout, so it flips everywhere or
    nowhere."""
    envs = ppo.make_envs("Breakout-v5", 8, 1, train=True, num_threads=1)
    rng = np.random.default_rng(0)
    frames = [envs.reset()[0]] + [envs.step(rng.integers(0, 4, 8))[0] for _ in range(31)]
    envs.close()
    states = torch.from_numpy(np.concatenate(frames))
    torch.manual_seed(1)
    with torch.no_grad():
        logits = ppo.Agent(4).logits(states)
    probs = torch.softmax(logits, dim=1)
    assert len(states) == 256 and len(set(logits.argmax(dim=1).tolist())) == 1
    assert 0.25 < probs.max(dim=1).values.min() and probs.max(dim=1).values.max() < 0.251


# ---------------------------------------------------------------- PPO pieces
def cleanrl_layout_agent(num_actions):
    """CleanRL's ppo_atari_envpool.py agent written out: conv 32-64-64, dense 512, then the actor (std 0.01) and
    the critic (std 1), each orthogonal with zero biases, created in that order."""
    def init(layer, std=math.sqrt(2)):
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
        return layer
    network = nn.Sequential(init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(), init(nn.Conv2d(32, 64, 4, stride=2)),
                            nn.ReLU(), init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
                            init(nn.Linear(3136, 512)), nn.ReLU())
    return network, init(nn.Linear(512, num_actions), 0.01), init(nn.Linear(512, 1), 1.0)


def test_one_seed_gives_cleanrls_initial_weights_and_outputs():
    torch.manual_seed(7)
    ours = ppo.Agent(4)
    torch.manual_seed(7)
    network, actor, critic = cleanrl_layout_agent(4)
    theirs = [*network.parameters(), *actor.parameters(), *critic.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs)) and len(theirs) == 12
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        hidden = network(x.float() / 255.0)
        torch.testing.assert_close(ours.logits(x), actor(hidden), rtol=0, atol=0)
        torch.testing.assert_close(ours.get_value(x), critic(hidden).view(-1), rtol=0, atol=0)


def test_gae_hand_example():
    # gamma = lambda = 0.5; the episode ends after t=1 (no bootstrap across it).
    adv = ppo.gae(torch.ones(3, 1), torch.zeros(3, 1), torch.tensor([[0.0], [1.0], [0.0]]), torch.tensor([2.0]),
                  0.5, 0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.25], [1.0], [2.0]]))


def test_rollout_storage_at_L_max_and_learning_rate():
    rollout = ppo.Rollout.allocate(256, 8, (4, 84, 84), "meta")
    assert rollout.obs.dtype == torch.uint8 and rollout.actions.dtype == torch.long
    assert rollout.nbytes == 256 * 8 * (4 * 84 * 84 + 8 + 4 * 4)  # 55.2 MiB at the defaults
    assert ppo.learning_rate_at(2.5e-4, 2048, 8192, True) == pytest.approx(2.5e-4 * 0.75, rel=1e-12)
    assert ppo.learning_rate_at(2.5e-4, 2048, 8192, False) == 2.5e-4


def test_defaults_are_cleanrls_ppo_and_the_chosen_abs_settings():
    a = ppo.Args()
    assert (a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs, a.learning_rate, a.anneal_lr) == (
        8, 128, 4, 4, 2.5e-4, True)
    assert (a.gamma, a.gae_lambda, a.clip_coef, a.clip_vloss, a.ent_coef, a.vf_coef, a.max_grad_norm) == (
        0.99, 0.95, 0.1, True, 0.01, 0.5, 0.5)
    assert a.total_timesteps == 10_000_000 and a.epochs_ref_steps == 128 and a.divergence == "kl"
    assert (a.num_steps_min, a.num_steps_max, a.adapt_freq, a.window, a.ema_beta) == (64, 256, 10, 10, 0.1)
    assert 0 < a.kl_low < a.kl_high and 0 < a.greedy_low < a.greedy_high <= 1


# ---------------------------------------------------------------- real tiny runs
@pytest.fixture(scope="module")
def abs_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("abs")
    p = run([*TINY, "--total-timesteps", "960", "--run-name", "abs", "--save-model"], out)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out / "abs", p


def test_end_to_end_abs_moves_L_and_logs_the_tags(abs_run):
    run_dir, p = abs_run
    res = json.loads((run_dir / "eval_results.json").read_text())
    assert res["algo"] == "abs_ppo_atari" and res["args"]["adapt"] is True and res["global_step"] >= 960
    ev = res["eval"]
    assert ev["episodes"] == 2 == len(ev["returns"]) and all(0 < n <= 100 for n in ev["lengths"])
    tags = scalars(run_dir)
    for tag in ["charts/episodic_return", "charts/SPS", "charts/SPS_interval", "charts/learning_rate",
                "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
                "losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "perf/env_seconds",
                "perf/inference_seconds", "perf/update_seconds", "perf/adapt_seconds", "perf/storage_bytes"]:
        assert tag in tags, tag
    adapt = ["adapt/kl", "adapt/divergence", "adapt/kl_mean", "adapt/num_steps", "adapt/batch_size",
             "adapt/update_epochs"]
    steps = [s for s, _ in tags["adapt/kl"]]
    assert len(steps) > 5 and all([s for s, _ in tags[t]] == steps for t in adapt)
    assert "adapt/divergence_mean" not in tags and "| kl_bar " in p.stdout
    kl, change = [v for _, v in tags["adapt/kl"]], [v for _, v in tags["adapt/divergence"]]
    assert all(k >= 0 for k in kl) and all(0 <= c <= 1 for c in change)
    assert max(kl) > 0 and max(change) > 0  # measured across an update (a snapshot taken after it reads 0)
    # Replay the logged KLs through the scheduler with TINY's settings: the logged L follow (float32 events).
    replay = ppo.ABSScheduler(4, 16, window=2, beta=0.5, delta_min=1e-7, delta_max=0.1)
    Ls = [int(v) for _, v in tags["adapt/num_steps"]]
    assert [replay.update(d) for d in kl] == Ls and len(set(Ls)) > 1 and all(4 <= L <= 16 for L in Ls)
    for (_, L), (_, B), (_, ep) in zip(tags["adapt/num_steps"], tags["adapt/batch_size"], tags["adapt/update_epochs"]):
        assert B == 4 * L and ep == ppo.update_epochs_for(int(L), 1, 8)
    for (s0, L), (s1, _) in zip(tags["adapt/num_steps"], tags["adapt/num_steps"][1:]):
        assert s1 - s0 == 4 * L  # each iteration runs the L of the measurement before it
    # ... and trains with the epoch rule's epochs at that L: Adam's step count is the sum over the iterations of
    # epochs(L) x 2 minibatches (the first iteration runs the burn-in's L, steps[0] / 4 envs)
    used = [int(steps[0]) // 4] + Ls[:-1]
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert int(ckpt["optimizer"]["state"][0]["step"]) == sum(2 * ppo.update_epochs_for(L, 1, 8) for L in used)
    assert len({ppo.update_epochs_for(L, 1, 8) for L in used}) > 1  # the epochs did change
    model = torch.load(run_dir / "model.pt", weights_only=True)
    ppo.Agent(4).load_state_dict(model["agent"])


def test_end_to_end_fixed_greedy_mode_with_track_divergence(tmp_path):
    p = run([*TINY, "--no-adapt", "--num-steps", "8", "--track-divergence", "--divergence", "greedy",
             "--total-timesteps", "256", "--eval-episodes", "1", "--eval-greedy", "--run-name", "fixed"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "fixed" / "eval_results.json").read_text())
    assert res["global_step"] == 256 and res["args"]["eval_greedy"] is True and res["eval"]["episodes"] == 1
    assert len(res["eval"]["action_counts"]) == 4 and sum(res["eval"]["action_counts"]) >= res["eval"]["lengths"][0]
    tags = scalars(tmp_path / "fixed")
    assert [v for _, v in tags["adapt/num_steps"]] == [8] * 8  # measured every iteration, never adapted
    change = [v for _, v in tags["adapt/divergence"]]
    means = [v for _, v in tags["adapt/divergence_mean"]]  # the greedy mode's window mean (W = 2)
    assert means == pytest.approx([np.mean(change[max(0, i - 1): i + 1]) for i in range(8)], abs=1e-6)
    assert "adapt/kl_mean" not in tags and "| delta_bar " in p.stdout


# ---------------------------------------------------------------- bad input
# This script's own flag checks (flag_problems): (argv, what the one error line must name), each run by
# tests/test_runs_all_scripts.py on a valid run of 8 steps.
BAD_INPUTS = [
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--log-every-seconds", "-1"], "--log-every-seconds"), (["--total-timesteps", "0"], "--total-timesteps"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--learning-rate", "1e38"], "--learning-rate"), (["--num-envs", "0"], "--num-envs"),
    (["--num-envs", "3000000000"], "--num-envs"), (["--num-minibatches", "0"], "--num-minibatches"),
    (["--gamma", "0"], "--gamma"), (["--gae-lambda", "1.1"], "--gae-lambda"), (["--clip-coef", "0"], "--clip-coef"),
    (["--ent-coef", "-0.1"], "--ent-coef"), (["--vf-coef", "-1"], "--vf-coef"),
    (["--max-grad-norm", "0"], "--max-grad-norm"), (["--num-steps", "0"], "--num-steps"),
    (["--num-steps-min", "0"], "--num-steps-min"), (["--num-steps-max", "0"], "--num-steps-max"),
    (["--num-steps-min", "300"], "--num-steps-min"),
    (["--num-envs", "1", "--num-minibatches", "8", "--num-steps-min", "9", "--num-steps-max", "15"],
     "--num-minibatches"),  # no L in [9, 15] makes 1 x L split into 8 minibatches
    (["--no-adapt", "--num-envs", "1", "--num-steps", "6"], "--num-minibatches"),
    (["--num-envs", "1", "--num-steps-min", "4", "--num-steps-max", "4"], "--num-minibatches"),  # 1 per minibatch
    (["--adapt-freq", "0"], "--adapt-freq"), (["--window", "0"], "--window"), (["--burn-in", "0"], "--burn-in"),
    (["--ema-beta", "0"], "--ema-beta"), (["--ema-beta", "1.5"], "--ema-beta"), (["--kl-low", "0"], "--kl-low"),
    (["--kl-low", "0.2", "--kl-high", "0.1"], "--kl-high"), (["--greedy-low", "0"], "--greedy-low"),
    (["--greedy-high", "1.5"], "--greedy-high"), (["--greedy-low", "0.5", "--greedy-high", "0.4"], "--greedy-high"),
    (["--divergence", "ess"], "--divergence"), (["--schedule", "cubic"], "--schedule"),
    (["--ref-batch-size", "0"], "--ref-batch-size"), (["--update-epochs", "0"], "--update-epochs"),
    (["--epochs-ref-steps", "0"], "--epochs-ref-steps"), (["--min-update-epochs", "0"], "--min-update-epochs"),
    (["--eval-episodes", "-1"], "--eval-episodes"), (["--eval-num-envs", "0"], "--eval-num-envs"),
    (["--eval-max-episode-steps", "0"], "--eval-max-episode-steps"),
    (["--env-id", "HalfCheetah-v5"], "--env-id"), (["--env-id", "NoGame-v5"], "--env-id"),
    (["--num-steps-max", str(10**12)], "--num-steps-max"), (["--no-adapt", "--num-steps", str(10**9)], "--num-steps"),
    (["--update-epochs", "1001"], "--update-epochs"), (["--epochs-ref-steps", "1"], "--epochs-ref-steps"),
    (["--min-update-epochs", "1001"], "--min-update-epochs"),  # the longest update's epochs above 1000
]
