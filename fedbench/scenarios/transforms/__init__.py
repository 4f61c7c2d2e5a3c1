"""Per-client feature transforms, applied on the worker each time a batch is formed.

A scenario never stores transformed images: each client view carries a descriptor, a tuple of frozen ops
(`ops.py`: rotate, colour, noise, photometric, each one class with its parameters, checks, description
and batch apply), and the worker turns it into a `BatchTransform` (`batch.py`) once per client job.
Every op works on the whole batch at once (no Python loop over samples; the tensor math is in
`kernels.py`), so the transform costs a few percent of a LeNet-5 epoch on 28x28 images, about 10% for
the photometric change of RGB images, the costliest (`bench/transform_cost.py` measures it).
"""

from fedbench.scenarios.transforms.batch import BatchTransform
from fedbench.scenarios.transforms.kernels import shift_hue
from fedbench.scenarios.transforms.ops import OPS, Canvas, Colour, Noise, Op, Photometric, Rotate, describe_ops

__all__ = [
    "OPS",
    "BatchTransform",
    "Canvas",
    "Colour",
    "Noise",
    "Op",
    "Photometric",
    "Rotate",
    "describe_ops",
    "shift_hue",
]
