"""Federations from datasets: partitions, (later) shifts and drift, test-time clients -> a Scenario artifact."""

from fedbench.scenarios.artifact import ClientView, Scenario
from fedbench.scenarios.generator import build_scenario

__all__ = ["ClientView", "Scenario", "build_scenario"]
