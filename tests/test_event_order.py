"""A resume on a node whose clock is behind: the scripts' writer (abs_utils.writer.event_writer) names its event file
after the run's earlier ones, so that TensorBoard reads them in the order they were written; and reproduce/events.py
reads a directory's files in write order (by the step each writer purged from) even where older names say otherwise,
so that no resumed step or final evaluation is hidden."""
import os
import sys
import time
from pathlib import Path

from types import SimpleNamespace

from tensorboard.summary.writer import event_file_writer
from torch.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reproduce import events  # noqa: E402
from abs_utils.writer import event_writer  # noqa: E402


def log(writer, steps):
    for s in steps:
        writer.add_scalar("charts/SPS", float(s), s)
    writer.close()


def test_a_resume_whose_clock_is_hours_behind_names_its_file_after_the_earlier_one(tmp_path, monkeypatch):
    log(event_writer(str(tmp_path), 0), range(0, 101, 10))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 7200)  # the resuming node's clock
    log(event_writer(str(tmp_path), 51), range(60, 201, 10))
    first, second = sorted(os.listdir(tmp_path))  # TensorBoard's order: the names'
    assert events.file_head(tmp_path / first) == (0, 0) and events.file_head(tmp_path / second) == (51, 60)
    steps, _ = events.read_run_events(tmp_path, ["charts/SPS"])[1]["charts/SPS"]
    assert list(steps) == [*range(0, 51, 10), *range(60, 201, 10)]


def test_files_named_out_of_order_by_an_older_writer_are_read_in_write_order(tmp_path, monkeypatch):
    log(SummaryWriter(str(tmp_path), purge_step=0), range(0, 101, 10))
    first = os.listdir(tmp_path)[0]
    real = time.time  # a plain SummaryWriter on the resuming node, whose clock is two hours behind
    monkeypatch.setattr(event_file_writer, "time", SimpleNamespace(time=lambda: real() - 7200))
    log(SummaryWriter(str(tmp_path), purge_step=51), range(60, 201, 10))
    names = sorted(os.listdir(tmp_path))
    assert names[1] == first  # TensorBoard would read the resumed file first
    assert [p.name for p in events.event_files(tmp_path)] == names[::-1]
    steps, _ = events.read_run_events(tmp_path, ["charts/SPS"])[1]["charts/SPS"]
    assert list(steps) == [*range(0, 51, 10), *range(60, 201, 10)]
