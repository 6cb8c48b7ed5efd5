"""The six training scripts and the tiny runs the tests start them with: the one table of them.

Each test file takes its commands from here: the machinery every script shares (tests/test_runs_all_scripts.py,
test_hardening_runs.py, test_stop_at_step.py), each script's own tests (test_<script>.py) and the device checks
(test_cuda.py). The flags leave out the device: the CPU suite adds --no-cuda (CPU), the device checks do not.
A later occurrence of a flag wins (tyro keeps the last value given), so a test adds to a run by appending."""
import importlib
import os
import sys
from dataclasses import dataclass

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


PQN_FIXED = ("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--no-adapt", "--num-steps", "4",
             "--total-timesteps", "64", *ATARI_EVAL)
SCRIPTS = {s.file: s for s in [
    Script("abs_pqn_atari.py", "q_network", fixed=PQN_FIXED,
           # L in [4, 16], a measurement every iteration and a window of 2 so that L moves
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min", "4",
                     "--num-steps-max", "16", "--adapt-freq", "1", "--window", "2", "--ref-batch-size", "64",
                     "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5"),
    Script("gns_pqn_atari.py", "q_network", fixed=PQN_FIXED,
           # early in Breakout B_simple is about 0-70, so with E = 8 the range L in [1, 8] is where round(B_simple / E)
           # lands; an estimate every iteration from 2 micro-batches (the cheapest), and epsilon decaying over the
           # whole run so that the envs' states and gradients differ
           adaptive=("--env-id", "Breakout-v5", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min", "1",
                     "--num-steps-max", "8", "--gns-freq", "1", "--gns-micro-batches", "2", "--exploration-fraction",
                     "1", "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5"),
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
           safe=("--num-envs", "8", "--total-timesteps", "8", "--eval-episodes", "0"), other_env="HalfCheetah-v5"),
    Script("abs_ppo_mujoco.py", "agent",
           fixed=("--env-id", "Hopper-v4", "--num-envs", "1", "--num-minibatches", "2", "--no-adapt", "--num-steps",
                  "64", "--update-epochs", "1", "--total-timesteps", "128"),
           # L in [64, 256] on InvertedPendulum-v5, a measurement every iteration, a window of 2
           adaptive=("--env-id", "InvertedPendulum-v5", "--num-steps-min", "64", "--num-steps-max", "256",
                     "--num-minibatches", "4", "--adapt-freq", "1", "--window", "2", "--total-timesteps", "2000",
                     "--eval-episodes", "2", "--log-every-seconds", "0", "--checkpoint-every", "0"),
           safe=("--env-id", "InvertedPendulum-v5", "--total-timesteps", "8", "--eval-episodes", "0"),
           other_env="Breakout-v5"),
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
           other_env="HalfCheetah-v5"),
    Script("abs_pqn_minatar.py", "q_network",
           fixed=("--env-id", "Breakout-MinAtar", "--num-envs", "8", "--num-minibatches", "2", "--no-adapt",
                  "--num-steps", "4", "--total-timesteps", "64", *ATARI_EVAL),
           # L in [4, 16], a measurement every iteration and a window of 2 so that L moves
           adaptive=("--env-id", "Breakout-MinAtar", "--num-envs", "8", "--num-minibatches", "2", "--num-steps-min",
                     "4", "--num-steps-max", "16", "--adapt-freq", "1", "--window", "2", "--ref-batch-size", "64",
                     "--eval-episodes", "2", "--eval-num-envs", "2", "--eval-max-episode-steps", "150",
                     "--log-every-seconds", "0"),
           safe=("--num-envs", "8", "--num-minibatches", "2", "--total-timesteps", "8", "--eval-episodes", "0"),
           other_env="Breakout-v5"),
]}
# The script that also runs the cases abs_utils handles alike for every script (a check written once there).
GENERIC = "abs_pqn_atari.py"
