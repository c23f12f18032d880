"""KV cache bookkeeping (no torch: tests/engine/test_torch_free.py): the lowest free slot first, so a decode
step over rows up to the highest occupied one touches few idle rows.
"""

from __future__ import annotations

import heapq


class KVSlots:
    def __init__(self, num_slots: int, max_seq_len: int) -> None:
        assert num_slots >= 1 and max_seq_len >= 1, "num_slots and max_seq_len must be >= 1"
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len  # token positions per slot (prompt + generated)
        self._free: list[int] = list(range(num_slots))  # a heap: lowest slot first
        self._slot_of: dict[str, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a request of `num_tokens` positions fits a slot, and one is free."""
        return 0 < num_tokens <= self.max_seq_len and bool(self._free)

    def allocate(self, request_id: str, num_tokens: int) -> int:
        """Give `request_id` a slot for `num_tokens` positions; returns the slot index."""
        assert request_id not in self._slot_of, f"{request_id} already holds a slot"
        assert self.can_allocate(num_tokens), "allocate without can_allocate"
        slot = self._slot_of[request_id] = heapq.heappop(self._free)
        return slot

    def free(self, request_id: str) -> None:
        """Return the request's slot to the free list; unknown ids are ignored."""
        slot = self._slot_of.pop(request_id, None)
        if slot is not None:
            heapq.heappush(self._free, slot)
        assert len(self._free) + len(self._slot_of) == self.num_slots
