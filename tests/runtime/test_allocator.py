"""keep_freed_memory: training jobs stop faulting in the memory glibc's malloc gave back after the last step."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

JOBS = """
import resource, sys
import numpy as np, torch, torch.nn.functional as F
from fedbench.models import build_model
from fedbench.runtime.allocator import keep_freed_memory

torch.set_num_threads(1)
if sys.argv[1] == "kept":
    assert keep_freed_memory()
model = build_model("lenet5", (1, 28, 28), 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images = np.random.default_rng(0).integers(0, 255, (20000, 1, 28, 28), dtype=np.uint8)

def job(rows):  # as a worker's fit job: the client's rows gathered, batches of 64 trained, the rows freed
    data = torch.from_numpy(images[rows])
    for start in range(0, len(rows), 64):
        x = data[start:start + 64].float().div_(255)
        optimizer.zero_grad()
        F.cross_entropy(model(x), torch.zeros(len(x), dtype=torch.long)).backward()
        optimizer.step()

rng = np.random.default_rng(1)
job(np.arange(1000))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in rng.integers(500, 3000, 12):
    job(rng.choice(20000, size, replace=False))
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    """Minor page faults of 12 LeNet-5 jobs of varied sizes (about 330 steps) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", JOBS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.slow
def test_kept_memory_is_not_faulted_in_again_step_after_step():
    kept = page_faults("kept")
    # measured here: 45,000-490,000 faults by default (malloc trims the freed activations, depending on the
    # heap's history), 1,200-2,300 kept (the client's rows of each job, first touched). Once in a CI run a fresh
    # default process did not fall into trimming (3,205 faults): the default is looked at in up to three processes.
    defaults = []
    while len(defaults) < 3 and not any(d > 10 * kept for d in defaults):
        defaults.append(page_faults("default"))
    assert max(defaults) > 10 * kept, (defaults, kept)
    assert kept < 10_000
