"""The lag definitions of streams.lag, one partition at a time (no servers)."""

from __future__ import annotations

from sessionstream.streams.lag import Newest, partition_lag


def test_a_caught_up_partition_lags_by_nothing_in_either_unit() -> None:
    lag = partition_lag(0, high=10, progress=9, newest=Newest(9, "s", 4), as_of_seq=4)
    assert (lag.offsets, lag.seq) == (0, 0)
    empty = partition_lag(1, high=0, progress=-1, newest=None, as_of_seq=None)
    assert (empty.offsets, empty.seq) == (0, 0)


def test_the_seq_lag_counts_the_newest_sessions_events_readers_cannot_see() -> None:
    lag = partition_lag(0, high=20, progress=11, newest=Newest(19, "s", 9), as_of_seq=6)
    assert (lag.offsets, lag.seq) == (8, 3)
    new_session = partition_lag(0, high=20, progress=11, newest=Newest(19, "n", 2),
                                as_of_seq=None)
    assert new_session.seq == 3  # seqs 0..2, none visible


def test_a_newest_record_that_was_not_read_leaves_the_seq_lag_unmeasured_not_zero() -> None:
    assert partition_lag(0, high=20, progress=11, newest=None, as_of_seq=None).seq is None
    dead = partition_lag(0, high=20, progress=11, newest=Newest(19, None, None),
                         as_of_seq=None)
    assert dead.seq is None and dead.offsets == 8


def test_a_refused_newest_record_already_folded_is_no_seq_lag() -> None:
    # a zombie's event at a taken seq: as_of_seq never reaches it, the progress does
    lag = partition_lag(0, high=20, progress=19, newest=Newest(19, "s", 3), as_of_seq=8)
    assert lag.seq == 0
