"""The deliberate copies across the training scripts, pinned.

Each script is one file a reader can follow top to bottom (CleanRL's style), so the ABS parts and their helpers are
copied into every script that uses them rather than imported. Here every top-level definition (function, class,
constant) that more than one script defines is either a copy, whose source text must be identical in the scripts of
one group, or a script's own (a different thing under the same name), with the reason. Where the copies of one name
fall into groups, the difference between consecutive groups is listed line by line (each line's indentation left
out; a changed indentation still shows as a - and a + line) with what it is for. An edit to one copy that is not made
to the others, or a new definition shared without being listed here, fails.

The training loops (`if __name__ == "__main__":`) are each script's own and not compared; the run machinery is not
copied at all: it is abs_utils, imported by every script (tests/test_abs_utils.py, tests/test_runs_all_scripts.py)."""
import ast
import difflib
import itertools
import math
import random

import pytest

from scripts import SCRIPTS  # the scripts (tests/scripts.py)

PQN, GNS, BTR = "abs_pqn_atari.py", "gns_pqn_atari.py", "abs_btr.py"
PPO_ATARI, PPO_MUJOCO = "abs_ppo_atari.py", "abs_ppo_mujoco.py"
MINATAR = "abs_pqn_minatar.py"
ALL = list(SCRIPTS)
ATARI = [PQN, GNS, PPO_ATARI, BTR]


def definitions(script) -> dict:
    """name -> source text (decorators included) of every top-level function, class and NAME = ... constant."""
    with open(SCRIPTS[script].path) as f:
        source = f.read()
    lines, found = source.splitlines(), {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        found[name] = "\n".join(lines[start - 1:node.end_lineno])
    return found


DEFINITIONS = {script: definitions(script) for script in SCRIPTS}


def difference(name, a, b) -> str:
    """The lines of a's copy of `name` that b's replaces (-) and b's that replace them (+), indentation left out."""
    diff = difflib.unified_diff(DEFINITIONS[a][name].splitlines(), DEFINITIONS[b][name].splitlines(), lineterm="", n=0)
    return "\n".join(line[0] + line[1:].strip() for line in diff if not line.startswith(("---", "+++", "@@")))


# name -> the groups of scripts whose copies are identical (one group: every script that has it holds the same text)
COPIES = {
    "SCRIPT": [ALL],
    "round_half_up": [ALL],
    "parse_args": [ALL],  # the flags: abs_utils.parse_args with the script's Args, rows and checkpoint keys
    "divergence_to_length": [[PQN, PPO_ATARI, PPO_MUJOCO, BTR, MINATAR]],
    "ABSScheduler": [[PQN, BTR, MINATAR], [PPO_ATARI, PPO_MUJOCO]],
    "measures_in": [[PQN, MINATAR], [PPO_ATARI, PPO_MUJOCO]],
    "update_epochs_for": [[PQN, GNS, MINATAR], [PPO_ATARI], [PPO_MUJOCO]],
    "behavioral_divergence": [[PQN, BTR, MINATAR]],
    "multiples_in": [[PPO_ATARI, PPO_MUJOCO]],
    "learning_rate_at": [[PQN, GNS, MINATAR], [PPO_ATARI, PPO_MUJOCO]],
    "linear_schedule": [[PQN, GNS, BTR, MINATAR]],
    "select_actions": [[PQN, GNS, BTR, MINATAR]],
    "autocast": [[PQN, GNS, BTR, MINATAR]],
    "make_envs": [ATARI],
    "is_atari": [ATARI],
    "evaluate": [[PQN, GNS], [BTR], [PPO_ATARI]],
    # gns_pqn_atari.py is abs_pqn_atari.py with ABS's controller replaced by GNS's: the rest is PQN's, as is
    **{name: [[PQN, GNS]] for name in ["NetworkConfig", "NETWORKS", "RUN_CONTROL_FLAGS", "nature_cnn",
                                        "ResidualBlock", "QNetwork"]},
    # abs_pqn_minatar.py is abs_pqn_atari.py's PQN + ABS on MinAtar: its PQN parts are copies, the network and the
    # environments its own
    **{name: [[PQN, GNS, MINATAR]] for name in ["CHECKPOINT_STATE", "q_lambda_returns", "Rollout", "pqn_update"]},
    # abs_ppo_atari.py is abs_ppo_mujoco.py's PPO on Atari (CleanRL's ppo_atari_envpool.py): its PPO parts are copies
    **{name: [[PPO_ATARI, PPO_MUJOCO]] for name in ["layer_init", "ppo_update"]},
    "gae": [[PPO_ATARI], [PPO_MUJOCO]],
}

# (name, a, b) -> (why they differ, the difference(name, a, b)): a is the first script of one group of COPIES[name],
# b the first of the next group
DIFFERENCES = {
    ("ABSScheduler", PQN, PPO_ATARI): (
        "PPO rounds L to a multiple at which E x L splits into equal minibatches (the minibatch count is fixed); "
        "PQN requires E divisible by it instead, and BTR rounds its batch outside the class (batch_size_of). The "
        "state (L, num_measurements) is the same, assigned on two lines", r'''
-def __init__(self, L_min, L_max, window, beta, delta_min, delta_max, schedule="log", burn_in=None):
+def __init__(self, L_min, L_max, window, beta, delta_min, delta_max, schedule="log", burn_in=None, multiple=1):
+self.multiple = multiple
-self.L, self.num_measurements = float(L_min), 0
+self.L = float(L_min)
+self.num_measurements = 0
-return round_half_up(self.L)
+"""L rounded half up to a multiple of `multiple` inside [L_min, L_max]; the script picks a multiple at which
+E x L transitions split into equal minibatches."""
+lo, hi = multiples_in(self.L_min, self.L_max, self.multiple)
+return min(max(self.multiple * round_half_up(self.L / self.multiple), lo), hi)'''),
    ("measures_in", PQN, PPO_ATARI): (
        "the same rule; PQN's docstring says why its first iteration is never measured (RAdam's first steps), PPO "
        "measures two divergences", r'''
-"""The divergence is measured across iteration `iteration` (counted from 0): the K-th, 2K-th, ... iteration, as in
-the authors' code (which counts from 1). Not the first: its update is RAdam's first, un-adapted steps, across
-which the divergence reads about 0 (docs/pqn.md), a value that would lower delta_bar through the whole burn-in."""
+"""The divergences are measured across iteration `iteration` (counted from 0): the K-th, 2K-th, ... iteration,
+as in the authors' code (which counts from 1), so that every scheduled measurement follows K - 1 updates."""'''),
    ("update_epochs_for", PQN, PPO_ATARI): (
        "PQN never runs fewer than its base epochs (the authors' PQN); PPO's floor is --min-update-epochs, 1 by "
        "default, so that a small L runs fewer epochs", r'''
-def update_epochs_for(L: int, base_epochs: int, ref_steps: int) -> int:
-"""Gradient-intensity compensation: updates per transition stay constant as L grows."""
-return max(base_epochs, round_half_up(base_epochs * L / ref_steps))
+def update_epochs_for(L: int, base_epochs: int, ref_steps: int, min_epochs: int = 1) -> int:
+"""Gradient-intensity compensation: updates per transition stay constant as L grows (4 epochs at L = 128)."""
+return max(min_epochs, round_half_up(base_epochs * L / ref_steps))'''),
    ("update_epochs_for", PPO_ATARI, PPO_MUJOCO): (
        "abs_ppo_mujoco.py's --base-epochs-in-burn-in keeps the base epochs until L first leaves L_min (the authors' "
        "code)", r'''
-def update_epochs_for(L: int, base_epochs: int, ref_steps: int, min_epochs: int = 1) -> int:
-"""Gradient-intensity compensation: updates per transition stay constant as L grows (4 epochs at L = 128)."""
-return max(min_epochs, round_half_up(base_epochs * L / ref_steps))
+def update_epochs_for(L: int, base_epochs: int, ref_steps: int, min_epochs: int = 1, keep_base: bool = False) -> int:
+"""Gradient-intensity compensation: updates per transition stay constant as L grows (PPO floor: 1 epoch).
+keep_base: the base epochs whatever L is (the authors' code before L first leaves L_min)."""
+return base_epochs if keep_base else max(min_epochs, round_half_up(base_epochs * L / ref_steps))'''),
    ("learning_rate_at", PQN, PPO_ATARI): (
        "PQN's is the authors' GNS code's, clamped at 0; PPO's is CleanRL's; equal for every step an iteration can "
        "start at (below --total-timesteps: test_learning_rate_at_agrees_where_an_iteration_can_start)", r'''
-"""The rate of an iteration that starts at global_step: constant, or with anneal linearly to 0 by the
-fraction of environment steps done (iterations vary in length), as in the authors' GNS code."""
-return learning_rate * max(0.0, 1.0 - global_step / total_timesteps) if anneal else learning_rate
+"""Constant, or with anneal linear to 0 in the fraction of environment steps done (iterations vary in length)."""
+return learning_rate * (1.0 - global_step / total_timesteps if anneal else 1.0)'''),
    ("gae", PPO_ATARI, PPO_MUJOCO): (
        "the same computation; on Atari a lost life ends the episode in training (--episodic-life)", r'''
-"""Advantages over a [L, E] rollout, computed backwards. dones[t]: transition t ended its episode (with
---episodic-life training, a lost life), terminated or truncated; no bootstrap across it, as in CleanRL."""
+"""Advantages over a [L, E] rollout, computed backwards. dones[t]: transition t ended its episode,
+terminated or truncated (as in CleanRL, a time-limit end does not bootstrap)."""'''),
    ("evaluate", PQN, BTR): (
        "BTR has no --eval-protocol: it evaluates by quotas, one game per env at a time", r'''
-"""--eval-episodes whole games, epsilon-greedy (--eval-epsilon), by abs_utils.play_atari_games (--eval-protocol);
---eval-fire-after-life-loss presses FIRE on the step after a lost life in games that have it (docs/pqn.md).
+"""--eval-episodes whole games, epsilon-greedy (--eval-epsilon), by abs_utils.play_atari_games;
+--eval-fire-after-life-loss presses FIRE on the step after a lost life in games that have it (docs/btr.md).
-episodes, protocol = args.eval_episodes, args.eval_protocol
-num_envs = args.eval_num_envs if protocol == "first-finished" else min(args.eval_num_envs, episodes)  # >= 1 game
-envs = make_envs(args.env_id, num_envs, seed, train=False, max_episode_steps=args.eval_max_episode_steps,
-render_mode=videos and "rgb_array")
+envs = make_envs(args.env_id, min(args.eval_num_envs, args.eval_episodes), seed, train=False,
+max_episode_steps=args.eval_max_episode_steps, render_mode=videos and "rgb_array")
-return U.play_atari_games(envs, act, episodes, fire, protocol, videos)
+return U.play_atari_games(envs, act, args.eval_episodes, fire, videos=videos)'''),
    ("evaluate", BTR, PPO_ATARI): (
        "PPO acts by sampling its policy (or its mode, --eval-greedy), not epsilon-greedy on Q-values", r'''
-def evaluate(q_network, args, seed, device, run_dir=None):
-"""--eval-episodes whole games, epsilon-greedy (--eval-epsilon), by abs_utils.play_atari_games;
---eval-fire-after-life-loss presses FIRE on the step after a lost life in games that have it (docs/btr.md).
+def evaluate(agent, args, seed, device, run_dir=None):
+"""--eval-episodes whole games by abs_utils.play_atari_games, with actions sampled from the policy (or its mode
+with --eval-greedy); --eval-fire-after-life-loss presses FIRE after a lost life in games that have it.
-with autocast(device, args.bf16):
-q_values = q_network(torch.from_numpy(obs).to(device)).float()
-return select_actions(q_values, args.eval_epsilon)[0].cpu().numpy()
+logits = agent.logits(torch.from_numpy(obs).to(device))
+sample = Categorical(logits=logits, validate_args=False).sample
+return (logits.argmax(dim=1) if args.eval_greedy else sample()).cpu().numpy()'''),
}

# name -> {script: why its definition is its own, not a copy}
OWN = {
    "Args": dict.fromkeys(ALL, "each script's flags, defaults and docstrings"),
    "flag_problems": dict.fromkeys(ALL, "each script's flag domains"),
    "RUN_CONTROL_FLAGS": dict.fromkeys([PPO_ATARI, PPO_MUJOCO, BTR, MINATAR],
                                       "the flags a resume takes from its command line"),
    "CHECKPOINT_STATE": dict.fromkeys([PPO_ATARI, PPO_MUJOCO, BTR], "the script's part of a checkpoint"),
    "behavioral_divergence": {PPO_MUJOCO: "the mean KL of the Gaussian policies, not the greedy-action change"},
    "Agent": {PPO_ATARI: "CleanRL's Nature-CNN actor-critic over frames",
              PPO_MUJOCO: "CleanRL's MLP actor-critic with a state-independent std"},
    "policy_divergences": {PPO_ATARI: "the categorical KL and the greedy-action change",
                           PPO_MUJOCO: "the Gaussian KL and delta_ESS of the actions taken"},
    "Rollout": {PPO_ATARI: "PPO's storage of frames (log-probabilities, dones, values)",
                PPO_MUJOCO: "PPO's storage of float observations and continuous actions"},
    "make_envs": {PPO_MUJOCO: "gymnasium's MuJoCo tasks with shared normalisation statistics, not envpool"},
    "evaluate": {PPO_MUJOCO: "MuJoCo episodes with the training's frozen observation statistics",
                 MINATAR: "MinAtar games (no lives, no FIRE, no protocol choice)"},
    "QNetwork": {MINATAR: "purejaxql's MinAtar network (3x3 conv, 128 units), not the Nature CNN"},
}


def test_every_definition_shared_by_name_is_a_copy_or_the_scripts_own():
    shared = {name: {s for s in SCRIPTS if name in DEFINITIONS[s]} for name in set().union(*DEFINITIONS.values())}
    shared = {name: scripts for name, scripts in shared.items() if len(scripts) > 1}
    listed = {name: set(itertools.chain(*COPIES.get(name, []), OWN.get(name, {}))) for name in {*COPIES, *OWN}}
    assert shared == listed


@pytest.mark.parametrize("name", sorted(COPIES))
def test_copies_are_identical_and_groups_differ_only_as_listed(name):
    groups = COPIES[name]
    for group in groups:
        for script in group[1:]:
            assert DEFINITIONS[script][name] == DEFINITIONS[group[0]][name], (
                f"{name} in {script} is not {group[0]}'s:\n{difference(name, group[0], script)}")
    for a, b in zip(groups, groups[1:]):
        reason, expected = DIFFERENCES[(name, a[0], b[0])]
        assert difference(name, a[0], b[0]) == expected.strip("\n"), (reason, difference(name, a[0], b[0]))
    assert {key for key in DIFFERENCES if key[0] == name} == {(name, a[0], b[0]) for a, b in zip(groups, groups[1:])}


def test_gns_shares_every_flag_but_the_controllers_with_abs_pqn_atari():
    gns, pqn = SCRIPTS[GNS].module(), SCRIPTS[PQN].module()
    g, a = vars(gns.Args()), vars(pqn.Args())
    shared = {k: v for k, v in g.items() if not k.startswith("gns_") and k != "exp_name"}
    assert shared == {k: a[k] for k in shared}  # every remaining flag, same default
    assert set(a) - set(g) == {"adapt_freq", "window", "ema_beta", "divergence_low", "divergence_high",
                               "ref_batch_size", "schedule", "track_divergence", "burn_in"}


# ---------------------------------------------------------------- where differing copies agree
def test_the_ppo_schedule_with_multiple_1_is_pqns():
    """With multiple 1 the PPO copy's rounding is PQN's: the same L on the same measurements, burn-in and clamps
    included."""
    pqn, ppo = SCRIPTS[PQN].module(), SCRIPTS[PPO_MUJOCO].module()
    rng = random.Random(0)
    for _ in range(50):
        L_min = rng.randint(1, 64)
        config = (L_min, L_min + rng.randint(0, 200), rng.randint(1, 5), rng.uniform(0.05, 1.0), 0.01, 0.5,
                  rng.choice(["log", "linear"]), rng.choice([None, 1, 3]))
        a, b = pqn.ABSScheduler(*config), ppo.ABSScheduler(*config, multiple=1)
        deltas = [10 ** rng.uniform(-3, 0) for _ in range(30)]
        assert [a.update(d) for d in deltas] == [b.update(d) for d in deltas] and a.state_dict() == b.state_dict()


def test_update_epochs_for_differs_only_in_its_floor():
    pqn, ppo_atari, ppo_mujoco = (SCRIPTS[s].module() for s in (PQN, PPO_ATARI, PPO_MUJOCO))
    for L, base, ref in itertools.product([1, 7, 16, 40, 64, 100, 4096], [1, 2, 4, 10], [8, 32, 128, 2048]):
        assert pqn.update_epochs_for(L, base, ref) == ppo_atari.update_epochs_for(L, base, ref, min_epochs=base)
        assert ppo_atari.update_epochs_for(L, base, ref, 2) == ppo_mujoco.update_epochs_for(L, base, ref, 2)
        assert ppo_mujoco.update_epochs_for(L, base, ref, keep_base=True) == base


def test_learning_rate_at_agrees_where_an_iteration_can_start():
    """Every script's loop runs while global_step < --total-timesteps, so an iteration starts below it: there the
    clamp of PQN's copy never acts. Past it PQN's stays at 0 and PPO's would turn negative."""
    pqn, ppo = SCRIPTS[PQN].module(), SCRIPTS[PPO_ATARI].module()
    for step, total, anneal in itertools.product(range(0, 1000, 37), [1000, 4096], [True, False]):
        assert pqn.learning_rate_at(2.5e-4, step, total, anneal) == pytest.approx(
            ppo.learning_rate_at(2.5e-4, step, total, anneal), rel=1e-12)
    assert pqn.learning_rate_at(2.5e-4, 1100, 1000, True) == 0.0 > ppo.learning_rate_at(2.5e-4, 1100, 1000, True)
    assert math.isclose(ppo.learning_rate_at(2.5e-4, 1000, 1000, True), 0.0, abs_tol=1e-18)


# ---------------------------------------------------------------- the run-control flags of each script's Args
# The flags that run a script rather than define its algorithm (its RUN_CONTROL_FLAGS, and the run's name, seed and
# place) stay in each script's Args, so that Args and --help show every flag of the script (docs/CONVENTIONS.md,
# "Layout of a script"). They are copies: each flag's line and docstring are the same in every script that has it,
# except these, which differ for the reason given.
FLAG_DIFFERENCES = {
    "seed": "the docstring names the environments' library (envpool, gymnasium, the MinAtar games)",
    "total_timesteps": "the paper's budget of each benchmark (Atari PQN and BTR 20M, Atari PPO 10M, MuJoCo 5M; "
                       "MinAtar 10M, purejaxql's)",
    "torch_threads": "MuJoCo's 64-unit MLPs run fastest on one thread (docs/ppo.md); the CNNs take torch's default",
    "checkpoint_every": "MuJoCo's runs are 1-5M steps: a checkpoint every 500k steps, Atari's every 1M",
    "save_model": "the docstring says what model.pt holds (a Q-network, an agent, an agent and its observation "
                  "statistics)",
    "eval_episodes": "MuJoCo's evaluation is 10 episodes (the paper's); the docstrings say what each evaluation is",
    "eval_num_envs": "the docstring says how the episodes are shared (PQN and GNS: the authors' protocol choice)",
    "eval_max_episode_steps": "Atari's cap is the ALE's 108k frames; MinAtar's is its own (gymnax: 1000)",
    "eval_fire_after_life_loss": "the docstring says what the authors' code of each algorithm did",
    "bf16": "the docstring says what stays float32 (the divergence, GNS's estimate, BTR's Q head)",
}


def args_fields(script) -> dict:
    """flag -> the source of its Args line and docstring."""
    tree = ast.parse(open(SCRIPTS[script].path).read())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Args").body
    return {node.target.id: ast.unparse(node) + "\n" + ast.unparse(after)
            for node, after in zip(body, body[1:]) if isinstance(node, ast.AnnAssign)}


def test_run_control_flags_are_copies_or_differ_as_listed():
    fields = {script: args_fields(script) for script in SCRIPTS}
    run_flags = {"exp_name", "seed", "torch_deterministic", "output_dir", "run_name"}
    for script in SCRIPTS:
        run_flags |= set(SCRIPTS[script].module().RUN_CONTROL_FLAGS)
    for flag in sorted(run_flags):
        variants = {fields[s][flag] for s in SCRIPTS if flag in fields[s]}
        types = {v.split("=")[0] for v in variants}
        assert len(types) == 1, f"--{flag} has another type in some script: {sorted(types)}"
        if flag in FLAG_DIFFERENCES:
            assert len(variants) > 1, f"--{flag} is the same everywhere now: remove it from FLAG_DIFFERENCES"
        else:
            assert len(variants) == 1, f"--{flag} differs between scripts:\n" + "\n".join(sorted(variants))
    assert set(FLAG_DIFFERENCES) <= run_flags
