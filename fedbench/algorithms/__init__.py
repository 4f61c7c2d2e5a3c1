"""One file per federated method: the server half (driver) and the client half (any worker)."""

from fedbench.algorithms.base import Algorithm, AlgorithmConfig, Assignment, ModelBuilder, make_algorithm

__all__ = ["Algorithm", "AlgorithmConfig", "Assignment", "ModelBuilder", "make_algorithm"]
