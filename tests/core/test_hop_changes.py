"""The watched set's changes: by name and URL, pure."""

from repro.core.hop import Hop
from repro.core.hop_changes import describe_hop_changes, hop_changes

A = Hop("engine-0", "http://10.0.0.1:30000")
B = Hop("engine-1", "http://10.0.0.2:30000")
C = Hop("engine-2", "http://10.0.0.3:30000")


def test_added_and_removed_by_name_and_url():
    assert hop_changes([A, B], [A, B]) == ([], [])
    assert hop_changes([A, B], [B, C]) == ([C], [A])
    assert hop_changes([], [A, B]) == ([A, B], [])
    assert hop_changes([A, B], []) == ([], [A, B])


def test_a_hop_that_moved_is_removed_then_added():
    moved = Hop("engine-0", "http://10.0.0.9:30000")
    assert hop_changes([A, B], [moved, B]) == ([moved], [A])
    line = describe_hop_changes([moved], [A])
    assert line == ("hops: 1 added, 1 removed: -engine-0 (http://10.0.0.1:30000), "
                    "+engine-0 (http://10.0.0.9:30000)")


def test_a_change_of_role_or_metrics_page_alone_is_no_change():
    # The watch keeps a hop's history by name and address; what it is read as may be re-decided.
    assert hop_changes([A], [Hop("engine-0", A.url, None, "router")]) == ([], [])


def test_nothing_changed_is_an_empty_line():
    assert describe_hop_changes([], []) == ""
    assert describe_hop_changes([C], []) == "hops: 1 added, 0 removed: +engine-2 (http://10.0.0.3:30000)"
