"""The tools' command line: argparse whose errors are one line of stderr and exit status 2, before anything is made
(docs/CONVENTIONS.md), shared by report.py, divergence_study.py, train_alike.py, sweep.py and bench/throughput.py."""
from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse with its errors (an unknown flag, a value of the wrong type or outside its choices, and the tool's
    own checks through error()) on one line of stderr, exit 2: "NAME: error: MESSAGE (NAME --help for the options)"
    for a tool that names itself (name="report.py"), else "error: MESSAGE (PROG --help for the options)" (sweep.py,
    whose subcommands' parsers, made by add_subparsers, are of this class and name their own PROG)."""

    def __init__(self, *args, name: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name

    def error(self, message):
        self.exit(2, f"{self.name + ': ' if self.name else ''}error: {message} "
                  f"({self.name or self.prog} --help for the options)\n")
