"""Schedule-building helpers pinned where the sampled mutation run (`make mutate-sample`,
docs/testing.md) found no test. Each test names the mutant it was written against."""
from __future__ import annotations

import pytest

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Op
from pptl.schedules import assemble
from pptl.schedules._order import Order


def test_order_of_no_rows_is_an_empty_order() -> None:
    # _order Order.of_rows 10 (one column left out of the empty order: a TypeError)
    order = Order.of_rows([])
    assert (len(order), order.ops(0), order.pair) == (0, [], None)


def test_indices_too_spread_to_pack_name_the_ops_own_ranges() -> None:
    # _assemble _messages 135: the message gives the stages the ops have (0..2), not the packing's
    # room around them (-1..3). 1 rank x 3 roles x 1 direction x 5 stage slots x (2**60 + 1)
    # micro-batches is past the 2**62 one int64 key packs.
    big = 1 << 60
    orders = {0: [Op(kind="F", rank=0, lane="compute", stage=0, mb=0),
                  Op(kind="F", rank=0, lane="compute", stage=2, mb=big)]}
    with pytest.raises(InputError) as e:
        assemble(Config(schedule="custom", pp=1, microbatches=1), "custom", orders, num_stages=1, microbatches=1)
    assert str(e.value) == f"assemble: the stages and micro-batches (0..2, 0..{big}) are too spread to relate"
