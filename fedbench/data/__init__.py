"""Dataset loaders: each module registers its datasets by name; `load_dataset` is the one way to load them.

Every dataset is one in-memory `BaseDataset` (official train and test splits concatenated, told apart by
meta['split']) that scenarios index into; images stay uint8 until `to_float_batch` forms a float batch.
"""

from fedbench.data.base import BaseDataset, load_dataset, to_float_batch

__all__ = ["BaseDataset", "load_dataset", "to_float_batch"]
