"""Model zoo: one module per registered model (module name = registry key), all built by `build_model`."""

from fedbench.models.base import FedModel, build_model, count_parameters

__all__ = ["FedModel", "build_model", "count_parameters"]
