"""The fixture `made_once` (tests/conftest.py), which makes the regenerated reports once for all workers."""
import pytest


def test_a_directory_is_filled_once_and_a_failed_fill_leaves_nothing_behind(made_once):
    calls = []

    def fill(out):
        calls.append(out)
        (out / "a").write_text("1")
    first = made_once("test-made-once-ok", fill)
    assert made_once("test-made-once-ok", fill) == first and calls == [first]  # the second ask reads the first's
    assert (first / "a").read_text() == "1"

    def broken(out):
        (out / "half").write_text("")
        raise RuntimeError("failed halfway")
    with pytest.raises(RuntimeError, match="failed halfway"):
        made_once("test-made-once-broken", broken)
    again = made_once("test-made-once-broken", fill)  # the next ask fills it again, from an empty directory
    assert sorted(p.name for p in again.iterdir()) == ["a"] and len(calls) == 2
