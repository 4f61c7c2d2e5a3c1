"""The base dataset is put in the object store once and workers read it there without a copy: its arrays stay
numpy (Ray serialises them out of band), so a node holds one copy however many workers and clients it has."""

import pytest

from fedbench.data import load_dataset

pytestmark = pytest.mark.ray


def test_workers_read_the_base_dataset_from_the_object_store_without_copying_it(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=1)
    def flags(dataset):
        return [(a.flags.owndata, a.flags.writeable) for a in (dataset.x, dataset.y)]

    dataset_ref = ray.put(load_dataset("digits"))
    assert ray.get(flags.remote(dataset_ref)) == [(False, False), (False, False)]  # views of shared memory
