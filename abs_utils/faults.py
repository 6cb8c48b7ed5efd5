"""What ends a run before its end, as one line that says what is saved and what to do: a write the disk refused
(exit 4) and a non-finite loss (exit 3). `Run` installs and calls these; docs/running.md, "Faults", lists each case."""
import errno
from typing import Optional

from .checkpoint import WriteFailed, cause_text, disk_error
from .flags import flag_of


class NonFiniteLoss(RuntimeError):
    """Raised by an update before its optimizer step when the loss or gradient is not finite (see Run.fail)."""


# The flags (of those a script has) whose lower values shrink a loss term or a step: the learning rate, the weights of
# PPO's entropy and value terms and of BTR's Munchausen term, and the gradient clip. A non-finite loss names them all
# with their values, since the step that failed does not say which term grew.
LOSS_SCALES = ("learning_rate", "ent_coef", "vf_coef", "munchausen_alpha", "max_grad_norm")


def loss_scales(args) -> str:
    return ", ".join(f"{flag_of(n)} {getattr(args, n)}" for n in LOSS_SCALES if hasattr(args, n))


def non_finite_line(error: Exception, global_step: int, path: str, args) -> str:
    return (f"error: {error} at global_step {global_step}; state before that step saved to {path}. Start again with "
            f"lower values of the flags that scale the loss or its steps ({loss_scales(args)}).")


def refused_write_line(error: BaseException, run_dir: str, checkpoint_path: str,
                       saved_step: Optional[int]) -> Optional[str]:
    """The line for an uncaught error whose cause is a write the disk refused (a checkpoint, eval_results.json,
    model.pt, the events, the output), or None for any other error (Python's traceback then)."""
    lost = error if isinstance(error, WriteFailed) else disk_error(error)
    if lost is None:
        return None
    what = (str(lost) if isinstance(lost, WriteFailed) else
            f"could not write to {run_dir} (the events or the output): {cause_text(lost.errno)}")
    fix = "free space" if lost.errno in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
    if saved_step is None:
        then = f"no checkpoint was written yet: {fix}, then run the same command again"
    else:
        then = (f"the last complete checkpoint, {checkpoint_path} at global_step {saved_step}, is intact: {fix}, "
                f"then run the same command with --resume {checkpoint_path}")
    return f"error: {what}; {then}"
