"""One file per federated method: the server half (driver) and the client half (any worker)."""

from fedbench.algorithms.base import Algorithm, AlgorithmConfig, ModelBuilder, make_algorithm
from fedbench.algorithms.capabilities import Assignment

__all__ = ["Algorithm", "AlgorithmConfig", "Assignment", "ModelBuilder", "make_algorithm"]
