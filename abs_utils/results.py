"""A run's result: eval_results.json (whose existence marks the run as finished), the evaluation's summary line and
warnings, and the earlier result a resume keeps beside the new one."""
import json
import os

from .evaluation import NEAR_CONSTANT_SHARE, top_action


def result_record(script: str, args, global_step: int, train_seconds: float, summary: dict) -> dict:
    """eval_results.json: the run, its step and flags, and the evaluation (summarize_eval)."""
    return {"algo": script, "env_id": args.env_id, "seed": args.seed, "run_name": args.run_name,
            "global_step": global_step, "total_timesteps": args.total_timesteps,
            # a prefix run (--stop-at-step) holds the first global_step steps of a longer protocol
            "complete": global_step >= args.total_timesteps,
            "train_seconds": train_seconds, "eval": summary, "args": vars(args)}


def print_eval(summary: dict) -> None:
    """The evaluation's line, and a warning where most games hit the step cap or the policy is near-constant (the
    evaluation policy's choices per action, action_counts: Atari's play_atari_games)."""
    if not summary["episodes"]:
        return
    print(f"eval: mean {summary['mean']:.2f} +- {summary['std']:.2f} over {summary['episodes']} episodes "
          f"({summary['capped']} hit the step cap)")
    if 2 * summary["capped"] > summary["episodes"]:
        print("warning: most evaluation episodes hit the step cap; their returns are those of games cut short")
    if sum(summary.get("action_counts", [])):
        action, share = top_action(summary["action_counts"])
        if share >= NEAR_CONSTANT_SHARE:
            print(f"warning: the evaluation policy chose action {action} on {share:.1%} of its steps "
                  f"(eval.action_counts): a near-constant policy, whose score is that of one action")


def keep_earlier_result(run_dir: str, global_step: int) -> None:
    """A resumed run that had written eval_results.json (a prefix run stopped by --stop-at-step, or a finished run
    extended) keeps that record as eval_results_at_<its step>.json, and its videos/ as videos_at_<its step>/: the
    new result never overwrites them."""
    path = os.path.join(run_dir, "eval_results.json")
    if os.path.exists(path):
        try:
            with open(path) as f:
                step = int(json.load(f)["global_step"])
        except (OSError, ValueError, KeyError, TypeError):
            step = global_step
        kept, n = os.path.join(run_dir, f"eval_results_at_{step}.json"), 1
        while os.path.exists(kept):  # a record kept before (the same step evaluated twice) stays as it is
            n += 1
            kept = os.path.join(run_dir, f"eval_results_at_{step}_{n}.json")
        os.replace(path, kept)
        print(f"kept the earlier result (at global_step {step}) as {kept}")
        videos = os.path.join(run_dir, "videos")  # its --capture-video games, beside it
        if os.path.isdir(videos):
            name = os.path.basename(kept).replace("eval_results_at_", "videos_at_", 1)[: -len(".json")]
            os.replace(videos, os.path.join(run_dir, name))
