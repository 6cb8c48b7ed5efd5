"""The run's TensorBoard writer, whose event file sorts after the run's earlier ones.

TensorBoard (and reproduce/events.py's reader, as a tie-break) reads a run directory's event files in the order of
their names, and a name starts with the wall-clock second the file was made. A resume on a node whose clock is
behind the earlier node's would name its file before the earlier file's, so that the earlier file, read last,
would hide the resumed steps. The writer made here takes, for its name, the later of the clock and one second past
the run's latest file."""
import os
import re
import time
from types import SimpleNamespace

from tensorboard.summary.writer import event_file_writer
from torch.utils.tensorboard import SummaryWriter

EVENT_FILE = re.compile(r"^events\.out\.tfevents\.(\d+)\.")


def event_writer(run_dir: str, purge_step: int) -> SummaryWriter:
    """SummaryWriter(run_dir, purge_step=purge_step) whose file name sorts after every event file in run_dir."""
    stamps = [int(m.group(1)) for name in os.listdir(run_dir) if (m := EVENT_FILE.match(name))]
    floor = max(stamps, default=0) + 1
    if time.time() >= floor:
        return SummaryWriter(run_dir, purge_step=purge_step)
    clock = event_file_writer.time  # the module's clock names the file (and stamps its first record)
    event_file_writer.time = SimpleNamespace(time=lambda: float(floor))
    try:
        return SummaryWriter(run_dir, purge_step=purge_step)
    finally:
        event_file_writer.time = clock
