"""A stand-in for slime.utils.types.Sample (slime cannot be installed here).

Its fields are those of slime's Sample at commit 624b824a
(slime/utils/types.py:93-151) that compactrl_slime reads or writes, with
slime's defaults, and its Status enum has slime's members and values
(types.py:130-140). Nothing else of slime is imitated.
"""

from dataclasses import dataclass, field
from enum import Enum


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list = ""
    tokens: list = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict | None = None
    loss_mask: list | None = None
    rollout_log_probs: list | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
