"""Federations from datasets: partitions, shifts, drift and test-time clients -> a Scenario artifact."""

from fedbench.scenarios.artifact import ClientView, Scenario, TestClient
from fedbench.scenarios.generator import build_scenario, check_scenario, facts_of
from fedbench.scenarios.presets import PRESETS, expand_preset, preset_normalization

__all__ = [
    "PRESETS",
    "ClientView",
    "Scenario",
    "TestClient",
    "build_scenario",
    "check_scenario",
    "expand_preset",
    "preset_normalization",
    "facts_of",
]
