#!/usr/bin/env python
"""The Markdown summary of one bench/gpu/check.sh call: test verdicts from tests.xml, the key numbers from
results.json (bench/throughput.py), then the full table. Prints to stdout.

    python bench/gpu/summary.py OUTDIR --tests-rc 0 --bench-rc 0 --seconds 431 --mode GPU
"""
import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path


def test_verdicts(xml_path: Path) -> tuple[dict, list[str]]:
    """Counts of passed / failed / error / skipped test cases and one line per failure, from a JUnit XML file."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    problems = []
    if not xml_path.exists():
        return counts, ["no tests.xml: pytest did not finish (time limit?)"]
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[kinds[0]] if kinds else "passed"
        counts[kind] += 1
        if kind in ("failed", "error"):
            child = case.find("failure") if kind == "failed" else case.find("error")
            message = (child.get("message") or "").strip().splitlines()
            problems.append(f"{kind}: `{name}`: {message[0][:300] if message else ''}")
    return counts, problems


def row_verdict(row: dict) -> str:
    """measured, skipped (bench/throughput.py --budget ran out before the row) or failed."""
    if row.get("sps") is not None:
        return "measured"
    return "skipped" if str(row.get("error", "")).startswith("skipped") else "failed"


def key_numbers(results: dict) -> list[str]:
    """One line per benchmark row that answers a question: SPS, ratio to the group's first row, peak CUDA memory;
    a row without a result says whether it was skipped for the time budget or failed."""
    env = results["env_only"]
    lines = [f"- envpool alone, {env['num_envs']} envs, random actions (the ceiling): " +
             (f"**{env['sps']:.0f} SPS**" if env["sps"] is not None else f"**no result** ({env.get('error')})")]
    for rows in results["groups"].values():
        base = rows[0]
        for r in rows:
            if r.get("sps") is None:
                why = (r.get("error") or "failed").strip().splitlines()[-1][:200]
                if row_verdict(r) == "skipped":
                    lines.append(f"- {r['name']}: **skipped** ({why.removeprefix('skipped:').strip()})")
                else:
                    lines.append(f"- {r['name']}: **no result** ({why})")
                continue
            cuda = f", peak CUDA {r['cuda_peak_bytes'] / 2**20:.0f} MiB" if r.get("cuda_peak_bytes") else ""
            stopped = r.get("stopped_rounds") and f", stopped at its time limit in {r['stopped_rounds']} round(s)" or ""
            ratio = f", {r['ratio']:.3f} x {base['name']}" if r is not base and r.get("ratio") else ""
            lines.append(f"- {r['name']}: {r['sps']:.0f} SPS, steady **{r['steady_sps']:.0f}**{ratio}{cuda}{stopped}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="the folder check.sh wrote")
    p.add_argument("--tests-rc", type=int, required=True)
    p.add_argument("--bench-rc", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True, help="wall time of the call so far")
    p.add_argument("--mode", default="GPU")
    args = p.parse_args(argv)
    out = Path(args.out)
    counts, problems = test_verdicts(out / "tests.xml")
    lines = [f"# bench/gpu/check.sh ({args.mode})", "",
             f"Wall time of the call: {args.seconds:.0f} s. Tests exit {args.tests_rc}, "
             f"benchmarks exit {args.bench_rc}.",
             "", "## Device tests (tests/test_cuda.py)", "",
             ", ".join(f"{v} {k}" for k, v in counts.items()), ""]
    lines += [f"- {x}" for x in problems] + ([""] if problems else [])
    results_path = out / "results.json"
    lines += ["## Benchmarks (bench/throughput.py --groups pqn-gpu btr-gpu)", ""]
    if results_path.exists():
        results = json.loads(results_path.read_text())
        verdicts = [row_verdict(r) for rows in results["groups"].values() for r in rows]
        lines += [f"Machine: {results['machine']}. Rounds: {results['rounds']}, "
                  f"budget {results['budget_seconds']:.0f} s. Rows: " +
                  ", ".join(f"{verdicts.count(v)} {v}" for v in ("measured", "skipped", "failed")) + ".", ""]
        lines += key_numbers(results) + ["", "Full table (results.md):", ""]
        if (out / "results.md").exists():
            lines += (out / "results.md").read_text().splitlines()[2:]
    else:
        lines.append("no results.json: the benchmark did not finish (see bench.log)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
