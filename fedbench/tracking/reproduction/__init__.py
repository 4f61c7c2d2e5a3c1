"""Reproduction reports: a task's runs beside the published numbers of its `reference:` block.

cells (a cell's runs and statistics), verdict (whether a cell's mean reproduces the published one), tables (paper
layout, and ours only), markdown and figures render them, report writes report.md and the PNGs and logs them under
the sweep's parent run.
"""

from fedbench.tracking.reproduction.report import DEFAULT_RESOLUTION, DEFAULT_TOLERANCE, Report, write_report

__all__ = ["DEFAULT_RESOLUTION", "DEFAULT_TOLERANCE", "Report", "write_report"]
