"""The README and docs/: every relative link and image resolves to a file, the README stays a landing page (at most
200 lines, none over 120 characters), and its two commands are there unchanged. Reads files only, in well under a
second."""
import ast
import math
import re
from pathlib import Path

import pytest

from scripts import SCRIPTS as ALL_SCRIPTS  # the scripts (tests/scripts.py)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# The README's two commands, byte for byte (CI and the docs cite them). They are the only lines allowed over 120
# characters: the first is longer than that and must not be broken.
COMMANDS = [
    "    python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && python abs_pqn_atari.py"
    " --env-id Breakout-v5",
    "    python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements-dev.txt && pytest -n auto",
]
MAX_LINES, MAX_WIDTH = 200, 120

# [text](target) and ![alt](target), with an optional "title"; text may hold one level of brackets (`[`a`](b)`).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text):
    """The text with fenced code blocks, indented code blocks and inline code spans blanked out, so that a
    `[i](j)` inside code is not taken for a link. Line numbers are kept."""
    out, in_fence, prev_blank = [], False, True
    for line in text.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
            out.append("")
            continue
        indented_code = prev_blank and line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|"))
        if in_fence or indented_code:
            out.append("")
            # an indented block goes on until a blank line; keep treating its lines as code
            prev_blank = True if indented_code and line.strip() else not line.strip()
            continue
        out.append(re.sub(r"`[^`\n]*`", "``", line))
        prev_blank = not line.strip()
    return "\n".join(out)


def links(path):
    """(line number, target) of every Markdown link and image in a file."""
    found = []
    for number, line in enumerate(prose(path.read_text(encoding="utf-8")).split("\n"), start=1):
        found += [(number, m.group(1)) for m in LINK.finditer(line)]
    return found


def local_target(target):
    """The path part of a link that points into the repository, or None for a web link, a mail link or a pure
    #anchor."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
        return None  # http:, https:, mailto: and other schemes; anchors within the page
    return target.split("#", 1)[0].split("?", 1)[0]


def broken_links(path, root=ROOT):
    """'file:line: target' for every relative link or image of a file whose target does not exist."""
    broken = []
    for number, target in links(path):
        local = local_target(target)
        if local is not None and not (path.parent / local).exists():
            broken.append(f"{path.relative_to(root)}:{number}: {target}")
    return broken


def test_docs_folder_has_the_pages():
    names = {p.name for p in PAGES}
    for page in ["pqn.md", "gns.md", "ppo.md", "btr.md", "running.md", "reproducing.md", "benchmarks.md",
                 "results-mujoco-1m.md", "results-mujoco-5m.md", "study-mujoco-ess.md", "CONVENTIONS.md",
                 "adding-abs.md", "ppo-atari.md", "results-atari10-early.md"]:
        assert page in names, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page), "\n".join(broken_links(page))


def test_readme_links_every_docs_page():
    linked = {(README.parent / local_target(t)).resolve() for _, t in links(README) if local_target(t)}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"README does not link {missing}"


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines = lines[:-1]
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"
    wide = [f"{n}: {len(line)}" for n, line in enumerate(lines, start=1)
            if len(line) > MAX_WIDTH and line not in COMMANDS]
    assert not wide, f"README.md lines over {MAX_WIDTH} characters: {wide}"


def test_readme_has_the_two_commands():
    lines = README.read_text(encoding="utf-8").split("\n")
    for command in COMMANDS:
        assert command in lines, f"README.md lacks the command line {command.strip()!r}"


# ---------------------------------------------------------------- the checker itself can fail
def test_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_text("x")
    page.write_text("\n".join([
        "[ok](there.md) [ok with anchor](there.md#part) [web](https://example.com/missing) [mail](mailto:a@b.c)",
        "[anchor](#somewhere) ![image](img/a.png) [`code text`](there.md)",
        "[gone](missing.md) ![gone image](img/b.png) [gone dir](nodir/#x)",
        "`[not a link](in-code.md)`",
        "",
        "    [indented code](also-code.md)",
        "",
        "```",
        "[fenced](fenced.md)",
        "```",
    ]))
    targets = [t for _, t in links(page)]
    assert "there.md#part" in targets and "img/a.png" in targets and "there.md" in targets
    assert not {"in-code.md", "also-code.md", "fenced.md"} & set(targets)
    assert broken_links(page, root=tmp_path) == ["page.md:3: missing.md", "page.md:3: img/b.png",
                                                 "page.md:3: nodir/#x"]


# ---------------------------------------------------------------- tables that restate the code stay equal to it
SCRIPTS = {s.label: s.file for s in ALL_SCRIPTS.values()}  # by their names in CONVENTIONS.md's tag table
PAGES_OF = {s.label: s.page for s in ALL_SCRIPTS.values() if s.page}
TAG = re.compile(r"^(?:charts|losses|adapt|perf|eval)/[A-Za-z_*]+$")


def tags_in_code(script):
    """Every TensorBoard tag a script writes, read from its source: its literal tags, PPO's losses/{name} from the
    keys ppo_update returns, and what abs_utils.Run writes for it (games, perf scalars per phase, the evaluation)."""
    source = (ROOT / script).read_text(encoding="utf-8")
    tags = {t for t in re.findall(r"\"([a-z]+/[A-Za-z_]+)\"", source) if TAG.match(t)}
    if 'f"losses/{name}"' in source:
        function = next(node for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.FunctionDef) and node.name == "ppo_update")
        returned = next(node.value for node in ast.walk(function) if isinstance(node, ast.Return))
        tags |= {f"losses/{key.value}" for key in returned.keys}
    if "run.log_games(" in source:
        tags |= {"charts/episodic_return", "charts/episodic_length"}
    if "perf=True)" in source:
        phases = ast.literal_eval(re.search(r"phases=(\([^)]*\))", source).group(1))
        tags |= {"charts/SPS_interval", "perf/cuda_peak_bytes", *(f"perf/{phase}_seconds" for phase in phases)}
    if "run.finish(" in source:
        tags.add("eval/mean_return")
    return tags


def section(page, heading):
    """The lines of a page's section, from its heading to the next heading of the same or a higher level."""
    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and heading in line)
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("#") and len(lines[i]) - len(lines[i].lstrip("#")) <= level), len(lines))
    return lines[start + 1:end]


def table_rows(lines, first_header):
    """The cells of the body rows of the Markdown table among `lines` whose header's first cell is `first_header`."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:  # after the header and its --- line
        if not line.strip().startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_conventions_tag_table_is_every_tag_each_script_writes():
    table = {name: set() for name in SCRIPTS}
    for tags, scripts, _ in table_rows(section("CONVENTIONS.md", "TensorBoard tags"), "tags"):
        names = list(SCRIPTS) if scripts == "all" else [s.strip() for s in scripts.split(",")]
        for name in names:
            table[name] |= set(re.findall(r"`([^`]+)`", tags))
    for name, script in SCRIPTS.items():
        code = tags_in_code(script)
        assert table[name] == code, (f"{script}: written but not in CONVENTIONS.md {sorted(code - table[name])}, "
                                     f"in CONVENTIONS.md but not written {sorted(table[name] - code)}")


@pytest.mark.parametrize("name", PAGES_OF)
def test_each_script_page_lists_the_tags_it_writes(name):
    """A page's tag section names no tag the script does not write, and covers every tag it writes, by name or by a
    wildcard (`perf/*`)."""
    code, lines = tags_in_code(SCRIPTS[name]), section(PAGES_OF[name], "TensorBoard tags")
    named = {t for t in re.findall(r"`([^`]+)`", "\n".join(lines)) if TAG.match(t)}
    exact = {t for t in named if "*" not in t}
    wildcards = [re.compile(re.escape(t).replace(r"\*", "[A-Za-z_]*") + "$") for t in named if "*" in t]
    assert exact <= code, f"{PAGES_OF[name]} names tags {SCRIPTS[name]} does not write: {sorted(exact - code)}"
    uncovered = {t for t in code - exact if not any(w.match(t) for w in wildcards)}
    assert not uncovered, f"{PAGES_OF[name]} does not list {sorted(uncovered)}"


def args_defaults(script):
    """The Args defaults of a script, read from its source (no import: the scripts need their environments)."""
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args")
    return {node.target.id: eval(compile(ast.Expression(node.value), script, "eval"), {"__builtins__": {}})
            for node in cls.body  # literals and arithmetic on them (0.005 / 256)
            if isinstance(node, ast.AnnAssign) and node.value is not None and node.target.id != "exp_name"}


@pytest.mark.parametrize("page, script", [("pqn.md", "abs_pqn_atari.py"), ("ppo.md", "abs_ppo_mujoco.py")])
def test_default_tables_are_the_scripts_defaults(page, script):
    defaults, checked = args_defaults(script), 0
    for flags, values, _ in table_rows(section(page, "The flags that matter"), "flag"):
        names = [f[2:].replace("-", "_") for f in re.findall(r"`(--[a-z-]+)`", flags)]
        quoted = [v.strip().strip("`") for v in values.split(",")]
        assert len(names) == len(quoted), f"{page}: {flags} | {values}"
        for name, value in zip(names, quoted):
            assert name in defaults, f"{page}: --{name} is not a flag of {script}"
            assert str(defaults[name]) == value or (not isinstance(defaults[name], str)
                                                     and float(defaults[name]) == float(value)), \
                f"{page}: --{name} default {value}, {script}: {defaults[name]!r}"
            checked += 1
    assert checked >= 8


# Spans `--flag value` in a script's page that show another setting, not the default (tests/scripts.py: each
# Script's page_other_settings); every other such span quotes the script's default, and a test keeps it so (a changed
# default, or a new example, must be written there or fixed).
OTHER_SETTINGS = {s.page: s.page_other_settings for s in ALL_SCRIPTS.values() if s.page}


@pytest.mark.parametrize("name", PAGES_OF)
def test_flag_values_quoted_in_a_script_page_are_its_defaults(name):
    page, defaults, quoted = PAGES_OF[name], args_defaults(SCRIPTS[name]), 0
    for span in re.findall(r"`(--[a-z][a-z-]* [^`\s]+)`", (ROOT / "docs" / page).read_text(encoding="utf-8")):
        flag, value = span.split(" ")
        default = defaults.get(flag[2:].replace("-", "_"), value)  # a flag of another script: not this one's
        if span in OTHER_SETTINGS[page] or default is None:
            continue
        same = str(default) == value or not isinstance(default, str) and float(default) == float(value)
        assert same, f"{page} quotes `{span}`, but {SCRIPTS[name]}'s default is {default!r}"
        quoted += 1
    assert quoted >= 2, f"{page}: only {quoted} quoted defaults checked"


# ---------------------------------------------------------------- pointers into the code stay true
TEXT_FILES = [*PAGES, *sorted(p for p in (ROOT / "bench").rglob("*") if p.suffix in {".md", ".sh", ".txt", ".py"})]


def test_every_test_file_and_test_named_in_the_docs_and_bench_exists():
    """`tests/test_x.py` paths and `test_name` functions (or `test_prefix*`) named in the README, docs/ and bench/
    exist, so that a renamed test does not leave a pointer to nothing."""
    defined = {name for path in (ROOT / "tests").glob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)}
    missing = []
    for path in TEXT_FILES:
        text = path.read_text(encoding="utf-8")
        missing += [f"{path.relative_to(ROOT)}: {p}" for p in set(re.findall(r"tests/test_\w+\.py", text))
                    if not (ROOT / p).exists()]
        for name in set(re.findall(r"`(test_\w+\*?)`", text)):
            found = any(d.startswith(name[:-1]) for d in defined) if name.endswith("*") else name in defined
            if not found:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_conventions_names_every_script_whose_fixed_batch_logs_adapt_tags_only_with_track_divergence():
    sentence = re.search(r"with `--no-adapt`,\s+(.+?) write them only with `--track-divergence`",
                         (ROOT / "docs" / "CONVENTIONS.md").read_text(encoding="utf-8"), re.S).group(1)
    named = {n.strip() for n in re.split(r",| and ", sentence.replace("\n", " ")) if n.strip()}
    having = {name for name, script in SCRIPTS.items() if "track_divergence" in args_defaults(script)}
    assert named == having


def test_btr_evaluation_flag_does_not_claim_the_papers_evaluation():
    """docs/btr.md: how the paper's BTR numbers were evaluated is not public, so no flag may say it gives them."""
    assert "how the paper's BTR numbers were evaluated is not public" in \
        " ".join((ROOT / "docs" / "btr.md").read_text(encoding="utf-8").split())
    tree = ast.parse((ROOT / "abs_btr.py").read_text(encoding="utf-8"))
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args")
    helps = [node.value.value for node in cls.body if isinstance(node, ast.Expr) and isinstance(node.value.value, str)]
    assert helps and not [h for h in helps if "paper's eval" in h]


def test_ppo_page_names_the_pinned_mujoco():
    """docs/ppo.md says which mujoco the -v4 tasks run on, and that requirements.txt pins it."""
    pins = re.findall(r"^mujoco==([\d.]+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)
    assert len(pins) == 1, "requirements.txt does not pin mujoco (docs/ppo.md says it is pinned)"
    page = " ".join((ROOT / "docs" / "ppo.md").read_text(encoding="utf-8").split())
    pinned = re.findall(r"mujoco (\d+\.\d+\.\d+), pinned", page)
    assert pinned and set(pinned) == {pins[0]}, pinned
    # any other mujoco named is the paper's authors' (beside their gymnasium 0.29.1)
    others = set(re.findall(r"mujoco (\d+\.\d+\.\d+)", page)) - {pins[0]}
    assert all(re.search(rf"gymnasium 0\.29\.1[ ,/]+mujoco {re.escape(v)}", page) for v in others), others


def tracked_bytes(commit=None, under=".", events_only=False):
    """Bytes of the files git tracks (at `commit`, or in this checkout), or None without git or the commit."""
    import subprocess

    command = ["git", "ls-tree", "-r", "-l", commit, under] if commit else ["git", "ls-files", "-z", under]
    try:
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # no git, not a checkout, or a shallow clone without it
        return None
    if commit:
        rows = [line.split(None, 4) for line in out.splitlines()]
        return sum(int(r[3]) for r in rows if r[1] == "blob" and (not events_only or "tfevents" in r[4]))
    return sum((ROOT / p).stat().st_size for p in out.split("\0") if p and (ROOT / p).is_file())


def test_benchmarks_page_sizes_of_the_repository():
    """The sizes docs/benchmarks.md gives for a commit are that commit's, and a checkout is still over 64 MiB, the
    upload limit it says the tracked files alone pass."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    commit = re.search(r"git ls-tree -r -l (\w+) \|", page).group(1)
    total = int(re.search(rf"git ls-tree -r -l {commit} \|.*# (\d+) bytes", page).group(1))
    events = int(re.search(rf"git ls-tree -r -l {commit} results \|.*# (\d+) bytes", page).group(1))
    assert f"{total / 2**20:.1f} MiB at commit {commit}, {events / 1e6:.1f} MB" in " ".join(page.split())
    checkout = tracked_bytes()
    if checkout is None:
        pytest.skip("not a git checkout")
    assert checkout > 64 * 2**20
    if tracked_bytes(commit) is not None:
        assert (tracked_bytes(commit), tracked_bytes(commit, "results", events_only=True)) == (total, events)


def test_ppo_atari_bounds_table_is_what_its_committed_runs_give():
    """docs/ppo-atari.md's bounds table, cell by cell, is results/ppo-atari-bounds/table.py on the committed runs,
    and the page's commands are those runs' flags (the stop step of each)."""
    import importlib.util
    import json

    folder = ROOT / "results" / "ppo-atari-bounds"
    spec = importlib.util.spec_from_file_location("bounds_table", folder / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    rows = table_rows(section("ppo-atari.md", "Choosing the divergence and its bounds"), "game")
    runs = [folder / "runs" / f"{game}-fixed128" for game in ("Breakout", "Qbert")]
    assert rows == [table.row(run) for run in runs]
    page = " ".join((ROOT / "docs" / "ppo-atari.md").read_text(encoding="utf-8").split())
    for run in runs:
        args = json.loads((run / "eval_results.json").read_text())["args"]
        assert (args["no_adapt"] if "no_adapt" in args else not args["adapt"]) and args["track_divergence"]
        assert (args["adapt_freq"], args["total_timesteps"], args["seed"]) == (2, 10_000_000, 1)
        assert f"--stop-at-step {args['stop_at_step']}" in page and args["run_name"] in page


def flat(text):
    """Text with its whitespace joined and Markdown's backticks dropped, for a phrase that a page restates."""
    return " ".join(text.replace("`", "").split())


def string_literals(path):
    """The string constants of a Python file, adjacent ones joined as Python joins them (an f-string: its literal
    parts): the messages a module prints, searchable by phrase."""
    found = []
    for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            found.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return found


def test_running_page_says_what_a_resume_with_another_total_needs():
    """docs/running.md's advice on a finished run and on another --total-timesteps is what abs_utils/parsing.py
    prints: another total needs --extend-schedules."""
    messages = " ".join(flat(m) for m in string_literals("abs_utils/parsing.py"))
    page = flat((ROOT / "docs" / "running.md").read_text(encoding="utf-8"))
    assert "To train on, give a larger --total-timesteps with --extend-schedules" in messages
    assert "to train on, give a larger --total-timesteps with --extend-schedules" in page
    assert "to go on with every schedule over the new total, add --extend-schedules" in messages
    assert "a larger --total-timesteps trains on" not in page


def test_no_page_resumes_with_another_total_without_extend_schedules():
    """A command line in the README or docs/ that resumes with a --total-timesteps also gives --extend-schedules:
    without it abs_utils refuses another total than the checkpoint's (exit 2), and the checkpoint's own total
    changes nothing."""
    bad = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in PAGES
           for line in page.read_text(encoding="utf-8").split("\n")
           if re.match(r"\s*(\S+=\S+ )*python \S+\.py .*--resume", line) and "--total-timesteps" in line
           and "--extend-schedules" not in line]
    assert not bad, bad


def test_pages_name_abs_utils_as_the_package_it_is():
    """The run machinery is the package abs_utils/; a page may name the earlier file abs_utils.py only for a commit
    that had it (a sentence with a commit hash in it)."""
    assert (ROOT / "abs_utils" / "__init__.py").is_file() and not (ROOT / "abs_utils.py").exists()
    stale = []
    for page in PAGES:
        for sentence in re.split(r"(?<=[.;])\s", " ".join(page.read_text(encoding="utf-8").split())):
            if re.search(r"(?<![\w/])abs_utils\.py", sentence) and not re.search(r"\b[0-9a-f]{7}\b", sentence):
                stale.append(f"{page.relative_to(ROOT)}: {sentence}")
    assert not stale, stale


def test_readme_says_what_ci_runs():
    """The README's account of .ci/run is its commands: a fresh venv from requirements-dev.txt, ruff, pytest (the
    README's test command), then pytest -m slow."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").split("\n")
          if line.strip() and not line.startswith("#")]
    steps = [next(i for i, line in enumerate(ci) if line == start or line.startswith(start + " "))
             for start in ("python3 -m venv", "pip install --quiet -r requirements-dev.txt", "ruff check .",
                           "pytest -q -n auto", "pytest -q -n auto -m slow")]
    assert steps == sorted(steps) and ci[-2:] == ["pytest -q -n auto", "pytest -q -n auto -m slow"], ci
    readme = flat(README.read_text(encoding="utf-8"))
    assert ("CI (.ci/run) makes a fresh virtual environment, installs requirements-dev.txt, runs ruff check ., then "
            "pytest -q -n auto and pytest -q -n auto -m slow") in readme


def test_readme_title_is_the_bibtex_title():
    """The paper's title, as the README gives it, is the one in its bibtex entry."""
    text = README.read_text(encoding="utf-8")
    title = re.search(r'^Paper: "([^"]+)"', text, re.M).group(1)
    assert re.search(r"^\s*title\s*=\s*\{([^}]+)\},$", text, re.M).group(1) == title


def test_cpu_torch_commands_install_the_pinned_torch():
    """The CPU-build command in the README and in requirements.txt's comment installs the version requirements.txt
    pins, from PyTorch's CPU wheel index."""
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    pin = re.search(r"^torch==([\d.]+);", requirements, re.M).group(1)
    command = f"pip install torch=={pin} --index-url https://download.pytorch.org/whl/cpu"
    assert command in requirements and command in flat(README.read_text(encoding="utf-8"))
    for text in (requirements, README.read_text(encoding="utf-8")):
        assert set(re.findall(r"torch[= ]=?(\d+\.\d+\.\d+)", text)) == {pin}


def test_benchmarks_page_device_test_counts_and_time_are_the_rehearsals():
    """docs/benchmarks.md's device-test counts are tests/test_cuda.py's cases, and its time is the one the committed
    rehearsal's console output ends its test run with."""
    tree = ast.parse((ROOT / "tests" / "test_cuda.py").read_text(encoding="utf-8"))
    cases = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            sizes = [len(d.args[1].elts) for d in node.decorator_list
                     if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"]
            cases += math.prod(sizes)
    console = (ROOT / "bench" / "gpu" / "rehearsal" / "console.log").read_text(encoding="utf-8")
    passed, skipped, seconds = re.search(r"=+ (\d+) passed, (\d+) skipped in ([\d.]+)s", console).groups()
    assert int(passed) + int(skipped) == cases
    page = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    assert f"On the CPU {passed} pass and {skipped} skip" in page
    assert f"they took {float(seconds):.0f} s ([its console output](../bench/gpu/rehearsal/console.log))" in page


def script_function(script, name):
    """A pure function of a script's source (with the module-level functions it calls), without importing the
    script, whose imports need its environments."""
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    needed, todo = [], [name]
    while todo:  # the function and the module functions it calls, transitively
        node = functions[todo.pop()]
        needed.append(node)
        todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in functions
                 and functions[n.id] not in needed and n.id not in todo]
    namespace = {"math": math}
    exec(compile(ast.Module(body=needed[::-1], type_ignores=[]), script, "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("page, script", [("pqn.md", "abs_pqn_atari.py"), ("ppo.md", "abs_ppo_mujoco.py")])
def test_script_pages_list_the_epoch_rules_departure_from_the_papers_formula(page, script):
    """The paper's Appendix 7.1 scales the epochs by L / L_min; the scripts scale them by L / --epochs-ref-steps (the
    authors' code). The page's differences list this, with the epochs of both at L_min and L_max, which are the
    script's own epoch rule (update_epochs_for) at its defaults, and the flag value that runs the formula."""
    d, rule = args_defaults(script), script_function(script, "update_epochs_for")
    base, ref, low, high = d["update_epochs"], d["epochs_ref_steps"], d["num_steps_min"], d["num_steps_max"]
    extra = (d["min_update_epochs"],) if "min_update_epochs" in d else ()
    paper = [base * L / low for L in (low, high)]
    code = [rule(L, base, ref, *extra) for L in (low, high)]
    assert all(p == int(p) for p in paper) and ref != low and code != paper
    differences = " ".join(" ".join(section(page, "Differences from the paper")).split())
    assert (f"N_epochs^scaled = N_epochs^base x L_adapt / L_min, which with `--update-epochs {base}` and "
            f"L_min = {low} gives {paper[0]:.0f} epochs at L_min and {paper[1]:.0f} at L_max = {high}") in differences
    assert f"(`--epochs-ref-steps {ref}`): {code[0]} epochs at L_min and {code[1]} at L_max" in differences
    assert f"`--epochs-ref-steps {low}` runs the formula as written" in differences


def test_mujoco_1m_page_says_its_simulator_check_is_not_the_authors_mujoco():
    """docs/results-mujoco-1m.md's simulator check ran a mujoco of the authors' series but not theirs: it names the
    mujoco docs/ppo.md gives as the authors' and says the check did not run it."""
    ppo = " ".join((ROOT / "docs" / "ppo.md").read_text(encoding="utf-8").split())
    authors = re.search(r"gymnasium 0\.29\.1, mujoco (\d+\.\d+\.\d+)\)", ppo).group(1)
    page = " ".join((ROOT / "docs" / "results-mujoco-1m.md").read_text(encoding="utf-8").split())
    ran = set(re.findall(r"gymnasium 0\.29\.1 \+ mujoco (\d+\.\d+\.\d+)", page))
    assert ran and authors not in ran
    assert f"the authors pin mujoco {authors}" in page and f"The authors' exact mujoco, {authors}**, which the check " \
        f"above did not run (it ran {', '.join(sorted(ran))})" in page


def test_the_one_table_of_scripts_has_every_script_and_the_readme_links_each():
    """tests/scripts.py lists every training script beside the README (so every shared test runs a new one), and the
    README's table of scripts links each."""
    on_disk = {p.name for p in [*ROOT.glob("abs_*.py"), *ROOT.glob("gns_*.py")]}
    assert set(ALL_SCRIPTS) == on_disk
    readme = README.read_text(encoding="utf-8")
    assert not [f for f in on_disk if f"| [{f}]({f}) |" not in readme]
