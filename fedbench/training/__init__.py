"""The one local-training loop, evaluation helpers, and moving weights between models and numpy arrays."""

from fedbench.training.client_data import ClientData, materialize
from fedbench.training.loop import (
    TrainHooks,
    evaluate,
    predict,
    probabilities,
    train_local,
    training_loss,
    training_losses,
)
from fedbench.training.weights import RunningAverage, average_weights, get_weights, set_weights

__all__ = [
    "ClientData",
    "TrainHooks",
    "RunningAverage",
    "average_weights",
    "evaluate",
    "get_weights",
    "materialize",
    "predict",
    "probabilities",
    "set_weights",
    "train_local",
    "training_loss",
    "training_losses",
]
