"""Schedule-building helpers pinned where the sampled mutation run (`make mutate-sample`,
docs/testing.md) found no test. Each test names the mutant it was written against."""
from __future__ import annotations

from pptl.schedules._order import Order


def test_order_of_no_rows_is_an_empty_order() -> None:
    # _order Order.of_rows 10 (one column left out of the empty order: a TypeError)
    order = Order.of_rows([])
    assert (len(order), order.ops(0), order.pair) == (0, [], None)
