"""The tools that run the paper's grids and make the reports and results pages from the runs (docs/reproducing.md).
A package: its modules import each other by relative imports, and its tools run from the repository root as
`python -m reproduce.NAME` (sweep, report, divergence_study, train_alike, early_page, mujoco_page, minatar_random)."""
