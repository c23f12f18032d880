from engine.kv_cache import KVSlots


def test_allocates_lowest_free_slot_and_reuses_freed() -> None:
    kv = KVSlots(num_slots=3, max_seq_len=100)
    assert [kv.allocate(r, 10) for r in ("a", "b", "c")] == [0, 1, 2]
    kv.free("c")
    kv.free("b")
    assert kv.num_free == 2
    assert kv.allocate("d", 10) == 1  # the lowest free slot, not the last freed


def test_full_cache_refuses_until_a_slot_is_freed() -> None:
    kv = KVSlots(num_slots=1, max_seq_len=100)
    kv.allocate("a", 50)
    assert not kv.can_allocate(10)
    kv.free("a")
    assert kv.can_allocate(10)


def test_request_longer_than_a_slot_never_fits() -> None:
    kv = KVSlots(num_slots=2, max_seq_len=100)
    assert kv.can_allocate(100) and not kv.can_allocate(101) and not kv.can_allocate(0)


def test_free_is_idempotent_and_ignores_unknown_ids() -> None:
    kv = KVSlots(num_slots=2, max_seq_len=10)
    kv.allocate("a", 5)
    kv.free("a")
    kv.free("a")
    kv.free("nobody")
    assert kv.num_free == 2
