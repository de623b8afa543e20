"""Importers: other projects' published measurements -> ssm-bench's tidy tables.

Each importer reads a clone of one external project and returns, per run, a cells table and
an ops table in the layout of ``results/precollected/<run>/tables/``, so our figures can be
drawn from their numbers beside ours.  Importers read CSV files with pandas only; they never
measure and never import torch.

- :mod:`ssmbench.importers.ssm_scope`: sapmitra/SSM-Scope (ISPASS 2026), runs
  ``ssm-scope-rtx4090`` and ``ssm-scope-jetson``.

Importing the package imports nothing heavy: :mod:`ssmbench.importers.layout` (where the
files lie) is read when the workflow is planned; the readers load pandas when used.
"""
