"""bench/gpu/check.sh, the one prepared call on the GPU machine, checked without a GPU: every module that what it runs
imports (the test files, bench/throughput.py, bench/gpu/summary.py, the scripts they start and what those import in
turn, imports inside functions included) is in the standard library, in this repository, on the GPU machine
(bench/gpu/gpu-machine.txt) or in the wheelhouse (bench/gpu/wheels.txt), so that a new import cannot break the call
unseen; its tables tell a row the time budget skipped from one that failed, and a run stopped at the end of its
share may end the iteration under way. Reads files, and runs one 6-second stand-in process."""
import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "bench" / "gpu"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(GPU))
import summary  # noqa: E402
import throughput  # noqa: E402

# Modules the call never imports although a file it runs names them: each for a feature the call does not use.
NOT_CARRIED = {"wandb": "imported only with --track, which needs a network the GPU machine does not have",
               "imageio_ffmpeg": "imported only with --capture-video (abs_utils/video.py), which the call does not use"}


def norm(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> list[str]:
    """The non-comment lines of a list file."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def wheel_pins() -> dict[str, str]:
    """bench/gpu/wheels.txt: distribution -> pinned version."""
    pins = [line.split("==") for line in listed(GPU / "wheels.txt")]
    assert all(len(p) == 2 for p in pins), "one NAME==VERSION a line"
    return {norm(name): version for name, version in pins}


def files_the_call_runs() -> list[Path]:
    """The Python files check.sh names (the test file, bench/throughput.py, bench/gpu/summary.py), pytest's
    conftest.py beside the tests, the scripts of the benchmark groups check.sh asks for, and the scripts the tests
    start (string constants naming a file in the repository's root)."""
    text = (GPU / "check.sh").read_text()
    paths = re.findall(r"(?<=[\s\"'/])(?:[\w.-]+/)*[\w-]+\.py\b", text)  # tests/x.py, "$ROOT/bench/y.py"
    named = [ROOT / p for p in dict.fromkeys(paths) if (ROOT / p).is_file()]
    tests = [p for p in named if p.parent.name == "tests"]
    conftests = [ROOT / "conftest.py", ROOT / "tests" / "conftest.py"]
    groups = re.search(r"--groups ((?:[a-z][\w-]* )+)", text).group(1).split()
    assert groups and set(groups) <= set(throughput.GROUPS), groups
    benched = [ROOT / script for quick in (True, False) for g in groups
               for _, script, _ in throughput.configs(quick)[g]]
    started = [ROOT / node.value for t in tests for node in ast.walk(ast.parse(t.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py")
               and (ROOT / node.value).is_file()]
    return list(dict.fromkeys(p for p in named + conftests + benched + started if p.is_file()))


def imported(path: Path) -> set[str]:
    """Dotted names of every import in a file, at any depth (functions, try blocks, conditions), relative ones made
    absolute against the file's package (`from .flags import x` in abs_utils/parsing.py: abs_utils.flags), the names a
    `from` imports as candidate modules too (`from reproduce import runs`: reproduce.runs), and of
    importlib.import_module("literal") calls."""
    package = path.parent.relative_to(ROOT).parts if path.is_relative_to(ROOT) else ()
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *[node.module or ""]]).strip(".") \
                if node.level else node.module
            names |= ({base} if node.module else set()) | {f"{base}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)
    return names


def local_files(name: str, importer: Path) -> list[Path] | None:
    """The repository's files that importing the dotted `name` may run: a module beside the importer or in the
    repository's root; a package of the root named alone, every file of it (abs_utils loads each of its files on
    first use of one of its names); a module of a package (`from reproduce.cli import Parser`), the package's
    __init__.py and that module; None when the name is not the repository's."""
    top, *rest = name.split(".")
    found = [d / f"{top}.py" for d in (importer.parent, ROOT) if (d / f"{top}.py").is_file()]
    if found:  # (`from scripts import SCRIPTS`: scripts.SCRIPTS is a name of that module)
        return found[:1]
    if not (ROOT / top / "__init__.py").is_file():
        return None
    if not rest:
        return sorted((ROOT / top).glob("*.py"))
    files, folder = [ROOT / top / "__init__.py"], ROOT / top
    for part in rest:
        if (folder / part / "__init__.py").is_file():
            folder = folder / part
            files.append(folder / "__init__.py")
        elif (folder / f"{part}.py").is_file():
            files.append(folder / f"{part}.py")
            break
        else:
            break
    return files


def third_party_imports(files: list[Path]) -> dict[str, set[str]]:
    """module -> the files that import it, over the files and the repository's modules they import in turn (found
    beside the importing file, in the repository's root, or in a package of the root such as reproduce/ or
    abs_utils/, as the call's sys.path finds them)."""
    seen, todo, found = set(), list(files), {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imported(path):
            local = local_files(name, path)
            if local is not None:
                todo += local
            elif name.split(".")[0] not in sys.stdlib_module_names:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.setdefault(name.split(".")[0], set()).add(str(where))
    return found


def not_carried(files: list[Path]) -> dict[str, str]:
    """Modules imported by the call that are neither on the GPU machine nor in the wheelhouse: module -> where."""
    on_machine = {norm(n) for n in listed(GPU / "gpu-machine.txt")}
    carried = on_machine | set(wheel_pins())
    by_module = importlib.metadata.packages_distributions()  # module -> distributions, from this environment
    problems = {}
    for module, where in sorted(third_party_imports(files).items()):
        dists = {norm(d) for d in by_module.get(module, [module])}
        if module not in NOT_CARRIED and not dists & carried:
            problems[module] = f"distribution {', '.join(sorted(dists))}, imported in {', '.join(sorted(where))}"
    return problems


def test_the_call_runs_the_scripts_the_tests_and_the_benchmark():
    names = {str(p.relative_to(ROOT)) for p in files_the_call_runs()}
    assert {"tests/test_cuda.py", "tests/conftest.py", "bench/throughput.py", "bench/gpu/summary.py",
            "abs_pqn_atari.py", "gns_pqn_atari.py", "abs_btr.py"} <= names
    assert "abs_ppo_mujoco.py" not in names  # MuJoCo stays off the GPU machine


def test_every_import_of_the_call_is_on_the_gpu_machine_or_in_the_wheelhouse():
    modules = third_party_imports(files_the_call_runs())
    # the closure reaches abs_utils through the scripts, and imports inside its functions (ale_py: evaluation)
    assert {"torch", "numpy", "envpool", "tyro", "ale_py", "tensorboard", "pytest"} <= set(modules)
    assert modules["ale_py"] == {"abs_utils/evaluation.py"}
    assert not_carried(files_the_call_runs()) == {}
    assert set(NOT_CARRIED) <= set(modules)  # an exception for an import that is gone goes too


def test_an_import_outside_both_lists_is_reported(tmp_path):
    script = tmp_path / "new_tool.py"
    script.write_text("import os\nimport abs_utils as U\n\n\ndef late():\n    from rliable import library\n"
                      "    import importlib\n    return importlib.import_module('scipy.stats')\n")
    problems = not_carried([script])
    assert set(problems) == {"rliable"}  # scipy is on the GPU machine; abs_utils's imports all are
    assert "new_tool.py" in problems["rliable"]


def test_the_wheelhouse_pins_one_version_each_within_requirements_txt():
    pins = wheel_pins()
    assert len(pins) == len(listed(GPU / "wheels.txt"))  # no distribution twice
    assert {"envpool", "tyro", "ale-py"} <= set(pins)
    on_machine = {norm(n) for n in listed(GPU / "gpu-machine.txt")}
    assert not set(pins) & on_machine  # the machine's own version stays (torch: its CUDA build)
    required = [Requirement(line.split("#")[0]) for line in listed(ROOT / "requirements.txt")
                if not line.startswith("-") and line != "."]  # "." is this project (its requires-python)
    for req in required:
        if norm(req.name) in pins:
            assert req.specifier.contains(pins[norm(req.name)]), (req, pins[norm(req.name)])
    assert sum(norm(req.name) in pins for req in required) >= 4  # envpool, ale-py, gymnasium, tyro


def test_a_row_the_budget_skipped_reads_skipped_not_failed():
    ok = {"name": "fine", "command": "a", "returncode": 0, "sps": 5.0, "steady_sps": 5.0, "peak_rss_mb": 1.0}
    skipped = {"name": "late", "command": "b", "returncode": None, "peak_rss_mb": 0.0,
               "error": "skipped: the budget was spent"}
    crashed = {"name": "broken", "command": "c", "returncode": 1, "peak_rss_mb": 1.0,
               "error": "Traceback\nValueError: x"}
    # a variant that crashed in one round and was skipped in the next failed
    rows = throughput.summarize([[ok], [skipped, skipped], [crashed, skipped]])
    results = {"mode": "quick", "machine": "m", "date": "d", "rounds": 2, "budget_seconds": 100.0,
               "groups": {"g": rows}, "env_only": {"num_envs": 16, "sps": 10.0}}
    assert throughput.failures(results) == (["broken"], ["late"])
    lines = throughput.markdown(results).splitlines()
    assert any(line.startswith("| late | skipped |") for line in lines), lines
    assert any(line.startswith("| broken | failed |") for line in lines), lines
    assert summary.key_numbers(results)[2:] == ["- late: **skipped** (the budget was spent)",
                                                "- broken: **no result** (ValueError: x)"]


def test_a_run_stopped_at_its_share_may_end_the_iteration_under_way(tmp_path):
    """SIGKILL comes kill_after seconds after the SIGTERM, not after the share: a run whose loop starts late (a slow
    start-up or compilation) and that then needs a while to finish its iteration exits 143 by itself."""
    script = tmp_path / "slow.py"
    script.write_text("import signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(2.5), sys.exit(143)))\n"
                      "time.sleep(3)\nprint('step 1', flush=True)\ntime.sleep(60)\n")
    (tmp_path / "bench").mkdir()
    row = throughput.run_variant(str(script), [], tmp_path, "", time_limit=1, kill_after=4)
    # SIGTERM at about 3 s, exit at about 5.5 s: past the share plus kill_after (5 s), inside SIGTERM plus kill_after
    assert row["stopped"] and row["returncode"] == 143 and 5 < row["wall_seconds"] < 7 + 5
    assert row["error"] == "step 1\n"  # no SPS events: no result, and the log's tail says why
