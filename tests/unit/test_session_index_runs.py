"""The session index's runs as read back from its hash fields (producers.index)."""

from __future__ import annotations

from sessionstream.producers.index import RUN_GAP, merge_runs, parse_runs


def test_runs_are_sorted_and_merged_when_they_overlap_or_lie_within_the_gap() -> None:
    assert merge_runs([(60 + RUN_GAP, 70 + RUN_GAP), (0, 9), (50, 60), (5, 7)]) == (
        (0, 70 + RUN_GAP),)
    assert merge_runs([(0, 9), (10 + RUN_GAP, 12 + RUN_GAP)]) == (
        (0, 9), (10 + RUN_GAP, 12 + RUN_GAP))


def test_closed_runs_and_the_open_run_make_the_index_runs() -> None:
    assert parse_runs("0:9 2000:2010 ", "5000", "5004", 0, 5004) == (
        (0, 9), (2000, 2010), (5000, 5004))


def test_an_index_written_before_runs_is_one_run_from_first_to_last() -> None:
    assert parse_runs(None, None, None, 7, 9000) == ((7, 9000),)


def test_unreadable_runs_fall_back_to_first_to_last() -> None:
    assert parse_runs("0:x ", "5", "6", 0, 6) == ((0, 6),)


def test_only_admitted_offsets_outside_the_runs_are_repairs() -> None:
    from sessionstream.producers.index import LogIndex
    from sessionstream.producers.readback import ReadBack
    from sessionstream.producers.resume import index_repairs

    rb = ReadBack("s", 0, 0, 5000, offsets={f"e{o}": o for o in
                                             (0, 5, 9, 2000, 2001, 4000, 4002)})
    idx = LogIndex(0, 0, 2001, False, ((0, 9), (2000, 2001)))
    assert index_repairs(rb, idx) == ((4000, 4002),)
    assert index_repairs(rb, None) == ((0, 9), (2000, 2001), (4000, 4002))
    other_partition = LogIndex(3, 0, 2001, False, ((0, 9000),))
    assert len(index_repairs(rb, other_partition)) == 3
