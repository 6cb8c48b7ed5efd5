"""The six training scripts and the tiny runs the tests start them with: the one table of them.

Each test file takes its commands from here: the machinery every script shares (tests/test_runs_all_scripts.py,
test_hardening_runs.py, test_stop_at_step.py), each script's own tests (test_<script>.py) and the device checks
(test_cuda.py). The flags leave out the device: the CPU suite adds --no-cuda (CPU), the device checks do not.
A later occurrence of a flag wins (tyro keeps the last value given), so a test adds to a run by appending."""
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU = ["--no-cuda"]
ATARI_EVAL = ["--eval-num-envs", "1", "--eval-max-episode-steps", "100"]  # one game of at most 100 steps at a time


@dataclass(frozen=True)
class Script:
    file: str  # the script, beside README.md
    network: str  # its network's key in a checkpoint
    fixed: tuple  # a run of a few iterations at a fixed L (or batch), --no-adapt, and a quick evaluation
    adaptive: tuple  # a run in which ABS (GNS in gns_pqn_atari.py) moves L (the batch) within a few hundred steps
    safe: tuple  # a valid run of 8 steps without evaluation: what a test of one bad flag adds it to
    other_env: str  # an environment id the script refuses (another benchmark's)
    stopped: "StoppedRun"  # a run stopped by SIGTERM and resumed (tests/test_runs_all_scripts.py)
    moving: tuple  # flags that make its schedules move over the whole run, on top of `fixed` (test_stop_at_step.py)
    label: str  # its name in docs/CONVENTIONS.md's TensorBoard tag table
    page: Optional[str] = None  # its docs page: the tags it lists and the defaults it quotes are checked (test_docs.py)
    page_other_settings: frozenset = frozenset()  # `--flag value` spans on that page that are not the default
    cheaper: tuple = ()  # flags that make `adaptive` cheaper where its network does not matter

    @property
    def name(self) -> str:  # the module name, also the checkpoint's and eval_results.json's "algo"
        return self.file[: -len(".py")]

    @property
    def path(self) -> str:
        return os.path.join(ROOT, self.file)

    def module(self):
        """The script imported as a module (its `if __name__ == "__main__":` part does not run)."""
        if ROOT not in sys.path:
            sys.path.insert(0, ROOT)
        return importlib.import_module(self.name)


@dataclass(frozen=True)
class StoppedRun:
    flags: tuple  # on top of `adaptive` and the CPU flag; stopped by SIGTERM once it trains
    total: int  # its --total-timesteps
    overshoot: int  # the last iteration's most steps past it (E x L_max)
    tag: str  # a schedule computed from --total-timesteps and the steps done
    value: Callable  # (script module, step s it is logged at, step s0 the iteration started at, total) -> its value
    measured: Optional[str] = None  # with --adapt-freq 3: the tag of each measurement, every 3rd iteration


def annealed(rate):  # the learning rate of an iteration that starts at step s0, logged at its end
    return lambda m, s, s0, total: rate * (1 - s0 / total)


def pqn_epsilon(end):  # PQN's epsilon logged at s: that of the last env step, s - 8 (8 envs), decaying over the run
    return lambda m, s, s0, total: m.linear_schedule(1.0, end, total, s - 8)


PQN_FIXED = ("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--no-adapt", "--num-steps", "4",
             "--total-timesteps", "64", *ATARI_EVAL)
SCRIPTS = {s.file: s for s in [
    Script("abs_pqn_atari.py", "q_network", fixed=PQN_FIXED,
           # L in [4, 16], a measurement every iteration and a window of 2 so that L moves
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min", "4",
                     "--num-steps-max", "16", "--adapt-freq", "1", "--window", "2", "--ref-batch-size", "64",
                     "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5",
           stopped=StoppedRun(("--exploration-fraction", "1.0", "--adapt-freq", "3"), 512, 8 * 16, "charts/epsilon",
                              pqn_epsilon(0.001), "adapt/divergence"),
           moving=("--anneal-lr", "--exploration-fraction", "1.0"), label="PQN", page="pqn.md",
           page_other_settings=frozenset({"--adapt-freq 1", "--num-minibatches 32", "--num-steps 40",
                                          "--epochs-ref-steps 16"})),
    Script("gns_pqn_atari.py", "q_network", fixed=PQN_FIXED,
           # early in Breakout B_simple is about 0-70, so with E = 8 the range L in [1, 8] is where round(B_simple / E)
           # lands; an estimate every iteration from 2 micro-batches (the cheapest), and epsilon decaying over the
           # whole run so that the envs' states and gradients differ
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min", "1",
                     "--num-steps-max", "8", "--gns-freq", "1", "--gns-micro-batches", "2", "--exploration-fraction",
                     "1", "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5",
           stopped=StoppedRun(("--exploration-fraction", "1.0"), 256, 8 * 8, "charts/epsilon", pqn_epsilon(0.001)),
           moving=("--anneal-lr", "--exploration-fraction", "1.0"), label="GNS", page="gns.md",
           page_other_settings=frozenset({"--gns-timing after", "--gns-micro-batching contiguous",
                                          "--gns-start-steps 32"})),
    Script("abs_ppo_atari.py", "agent",
           fixed=("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--no-adapt", "--num-steps",
                  "16", "--update-epochs", "1", "--total-timesteps", "128", *ATARI_EVAL),
           # 4 envs, L in [4, 16], 1 epoch at L = 8, a measurement every iteration, a window of 2, KL bounds wide
           # around a tiny run's KL and a fast EMA
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "4", "--num-minibatches", "2", "--num-steps-min", "4",
                     "--num-steps-max", "16", "--update-epochs", "1", "--epochs-ref-steps", "8", "--adapt-freq", "1",
                     "--window", "2", "--ema-beta", "0.5", "--kl-low", "1e-7", "--kl-high", "0.1", "--ref-batch-size",
                     "32", "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "100",
                     "--log-every-seconds", "0", "--checkpoint-every", "0"),
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5",
           stopped=StoppedRun(("--torch-threads", "1", "--env-threads", "1", "--adapt-freq", "3"), 640, 4 * 16,
                              "charts/learning_rate", annealed(2.5e-4), "adapt/kl"),
           moving=(), label="PPO-Atari"),  # the learning rate anneals by default
    Script("abs_ppo_mujoco.py", "agent",
           fixed=("--env-id", "Hopper-v4", "--num-envs", "1", "--num-minibatches", "2", "--no-adapt", "--num-steps",
                  "64", "--update-epochs", "1", "--total-timesteps", "128"),
           # L in [64, 256] on InvertedPendulum-v5, a measurement every iteration, a window of 2
           adaptive=("--env-id", "InvertedPendulum-v5", "--num-steps-min", "64", "--num-steps-max", "256",
                     "--num-minibatches", "4", "--adapt-freq", "1", "--window", "2", "--total-timesteps", "2000",
                     "--eval-episodes", "2", "--log-every-seconds", "0", "--checkpoint-every", "0"),
           safe=("--env-id", "InvertedPendulum-v5", "--total-timesteps", "8", "--eval-episodes", "0"),
           other_env="Breakout-v5",
           stopped=StoppedRun(("--adapt-freq", "3"), 1000, 256, "charts/learning_rate", annealed(3e-4), "adapt/kl"),
           moving=(), label="PPO", page="ppo.md",  # the learning rate anneals by default
           page_other_settings=frozenset({"--divergence ess", "--epochs-ref-steps 1024"})),
    Script("abs_btr.py", "q_network",
           fixed=("--env-id", "Breakout-v5", "--num-envs", "8", "--buffer-size", "4096", "--learning-starts", "200",
                  "--no-impala", "--hidden-size", "16", "--num-cosines", "16", "--no-adapt", "--batch-size", "32",
                  "--total-timesteps", "64", *ATARI_EVAL),
           # the batch in [32, 64], a measurement every 2nd gradient step over one, a window of 2, a fast EMA
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "8", "--buffer-size", "4096", "--learning-starts",
                     "400", "--hidden-size", "16", "--num-cosines", "16", "--batch-size-min", "32",
                     "--batch-size-max", "64", "--ref-batch-size", "64", "--adapt-freq", "2", "--divergence-span",
                     "1", "--window", "2", "--ema-beta", "0.5", "--target-network-frequency", "10",
                     "--exploration-steps", "400", "--eval-episodes", "1", "--eval-num-envs", "1",
                     "--eval-max-episode-steps", "50", "--scalar-every", "5", "--log-every-seconds", "0",
                     "--checkpoint-every", "0"),
           safe=("--no-impala", "--hidden-size", "16", "--num-cosines", "16", "--num-envs", "8", "--buffer-size",
                 "4096", "--learning-starts", "400", "--total-timesteps", "8", "--eval-episodes", "0"),
           other_env="HalfCheetah-v5",
           # 400 --exploration-steps (the default is 2M) and epsilon off from step 400 = max(--learning-starts, half
           # of the 480 steps); one vector step of 8 envs at a time
           stopped=StoppedRun(("--no-impala",), 480, 8, "charts/epsilon",
                              lambda m, s, s0, total: m.exploration_epsilon(
                                  s - 8, "geometric", 1.0, 0.01, 400, m.epsilon_off_step(total, 0.5, 400, True))),
           moving=("--exploration-steps", "400", "--target-network-frequency", "10", "--scalar-every", "1"),
           label="BTR", page="btr.md",
           page_other_settings=frozenset({"--epsilon-schedule linear", "--maxpool-size 0",
                                          "--epsilon-off-fraction 1"}),
           cheaper=("--no-impala",)),
    Script("abs_pqn_minatar.py", "q_network",
           fixed=("--env-id", "Breakout-MinAtar", "--num-envs", "8", "--num-minibatches", "2", "--no-adapt",
                  "--num-steps", "4", "--total-timesteps", "64", *ATARI_EVAL),
           # L in [4, 16], a measurement every iteration and a window of 2 so that L moves
           adaptive=("--env-id", "Breakout-MinAtar", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min",
                     "4", "--num-steps-max", "16", "--adapt-freq", "1", "--window", "2", "--ref-batch-size", "64",
                     "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--num-minibatches", "2", "--total-timesteps", "8", "--eval-episodes", "0"),
           other_env="Breakout-v5",
           stopped=StoppedRun(("--exploration-fraction", "1.0", "--adapt-freq", "3"), 512, 8 * 16, "charts/epsilon",
                              pqn_epsilon(0.05), "adapt/divergence"),
           moving=("--exploration-fraction", "1.0"), label="PQN-MinAtar", page="minatar.md",  # lr anneals by default
           page_other_settings=frozenset({"--obs-divisor 255"})),
]}
# The script that also runs the cases abs_utils handles alike for every script (a check written once there).
GENERIC = "abs_pqn_atari.py"
