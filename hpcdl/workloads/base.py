"""What a workload is: the :class:`Workload` every built-in and user factory becomes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import UserError


class WorkloadError(UserError, ValueError):
    """A workload cannot be found or built as asked (a user error: exit status 2)."""


@dataclass
class Workload:
    name: str
    model: Any                              # a Keras model, built
    loss: Callable                          # loss(y_true, y_pred) -> scalar mean over the batch
    make_optimizer: Callable[[float], Any]  # lr -> Keras optimizer
    train: Any = None                       # (x, y) numpy arrays, or an unbatched tf.data dataset
    test: Any = None                        # (x, y) numpy arrays, or None
    synthetic: Any = None                   # (x, y) tensors of one per-rank batch (throughput)
    lr: float = 1e-3                        # at ref_batch
    ref_batch: int = 100                    # the global batch the lr is given for
    batch_size: int = 100                   # default per-rank batch
    steps: int = 1000                       # default number of steps
    accuracy: bool = False                  # report classification accuracy
    unit: str = "samples"                   # what throughput counts: samples or img
    # the step functions converted by AutoGraph (a user's model may branch on tensors in Python);
    # the built-ins' steps are straight-line code and skip it, and with it the conversion of
    # Horovod's own Python the step calls (a fifth of a short run's time: docs/decisions.md)
    autograph: bool = True
    info: dict = field(default_factory=dict)

    @property
    def num_samples(self) -> Optional[int]:
        if isinstance(self.train, tuple):
            return len(self.train[0])
        return None
