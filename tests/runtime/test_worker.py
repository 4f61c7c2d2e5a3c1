"""The client worker: where its jobs run."""

import pytest
import torch

from fedbench.runtime.worker import client_device


def test_gpus_asked_for_where_torch_sees_none_train_on_cpu_with_a_warning_naming_the_field(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="resources.client_gpus is 0.5 .* clients train on CPU"):
        assert client_device(0.5) == "cpu"
    assert client_device(0.0) == "cpu"
