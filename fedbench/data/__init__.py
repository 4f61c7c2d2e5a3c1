"""Dataset loaders: each module registers its datasets by name; `load_dataset` is the one way to load them.

Every dataset is one in-memory `BaseDataset` (official train and test splits concatenated, told apart by
meta['split']) that scenarios index into; images stay uint8 until `to_float_batch` forms a float batch.
`dataset_facts` says what a dataset is (classes, image shape, meta columns, superclasses) without loading
it, so that tasks are checked when they are loaded.
"""

from fedbench.data.base import (
    BaseDataset,
    DatasetFacts,
    dataset_facts,
    load_dataset,
    normalization_values,
    to_float_batch,
)

__all__ = ["BaseDataset", "DatasetFacts", "dataset_facts", "load_dataset", "normalization_values", "to_float_batch"]
