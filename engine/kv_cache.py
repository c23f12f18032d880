"""KV cache bookkeeping: which request holds which slot (no torch, STYLE.md §3).

The memory is one tensor that engine/model_runner.py allocates; here we only count:
`num_slots` slots of `max_seq_len` positions, one per running request, handed out lowest
first so occupied slots stay packed and a decode step over `[0, high_water)` touches few
idle rows. Ask/do pairs: `can_allocate(num_tokens)` before `allocate(request_id, num_tokens)`.
"""

from __future__ import annotations

import heapq


class KVSlots:
    def __init__(self, num_slots: int, max_seq_len: int) -> None:
        assert num_slots >= 1, "num_slots must be >= 1"
        assert max_seq_len >= 1, "max_seq_len must be >= 1"
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len  # token positions per slot (prompt + generated)
        self._free: list[int] = list(range(num_slots))  # a heap: lowest slot first
        self._slot_of: dict[str, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._slot_of)

    @property
    def high_water(self) -> int:
        """One past the highest occupied slot (0 when empty)."""
        return max(self._slot_of.values(), default=-1) + 1

    def fits(self, num_tokens: int) -> bool:
        """Whether a request of `num_tokens` positions could ever fit in one slot."""
        return 0 < num_tokens <= self.max_seq_len

    def can_allocate(self, num_tokens: int) -> bool:
        return self.fits(num_tokens) and bool(self._free)

    def allocate(self, request_id: str, num_tokens: int) -> int:
        """Give `request_id` a slot for `num_tokens` positions; returns the slot index."""
        assert request_id not in self._slot_of, f"{request_id} already holds a slot"
        assert self.can_allocate(num_tokens), "allocate without can_allocate"
        slot = heapq.heappop(self._free)
        self._slot_of[request_id] = slot
        return slot

    def slot(self, request_id: str) -> int | None:
        return self._slot_of.get(request_id)

    def free(self, request_id: str) -> None:
        """Return the request's slot to the free list; unknown ids are ignored."""
        slot = self._slot_of.pop(request_id, None)
        if slot is not None:
            heapq.heappush(self._free, slot)
        assert len(self._free) + len(self._slot_of) == self.num_slots
