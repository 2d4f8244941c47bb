"""Check rules pinned where the sampled mutation run (`make mutate-sample`, docs/testing.md) found no
test. Each test names the mutant it was written against."""
from __future__ import annotations

from pptl.checks import run_checks
from pptl.formats.torch_csv import load_csv_text


def test_send_listed_twice_is_pp002_pointing_at_that_send() -> None:
    # checks.structure duplicate_ops 79 (the violation's ops left empty): rank 0 issues its SEND_F
    # of stage 0 mb 0 twice; the second is the duplicate, and the violation names it
    text = "0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"
    found = [(v.message, v.ops) for v in run_checks(load_csv_text(text)[0]) if v.code == "PP002"]
    assert found == [("duplicate op r0/send/SEND_F s0 mb0 ->r1", ("r0/send/SEND_F s0 mb0 ->r1",))]


# A rank that holds stages 0 and 1 (one line of the CSV): each stage has its own W FIFO.
_TWO_STAGES = "0F0,0F1,1F0,1F1,1I0,1I1,0I0,0I1,0W1,0W0,1W0,1W1\n"
_PP021_S0 = ("r0/compute/W s0 mb1 pops the weight-gradient FIFO of rank 0, stage 0 before r0/compute/W s0 mb0: its I "
             "ran after r0/compute/I s0 mb0, and W drains in the order of its I")


def test_each_stage_of_a_rank_drains_its_own_weight_gradient_fifo() -> None:
    # checks.overlap w_fifo_order 32 (one FIFO per lane instead of per stage): stage 1's I ran
    # before stage 0's, and its Ws come after stage 0's; only stage 0's own order (W mb1 before
    # W mb0) is wrong, and the report names stage 0's head, not stage 1's
    found = [(v.message, v.ops) for v in run_checks(load_csv_text(_TWO_STAGES)[0]) if v.code == "PP021"]
    assert found == [(_PP021_S0, ("r0/compute/W s0 mb1", "r0/compute/I s0 mb0"))]


def test_a_weight_gradient_with_no_earlier_input_gradient_does_not_end_the_fifo_walk() -> None:
    # checks.overlap w_fifo_order 55 (a W with no earlier I): W mb2 comes first (PP006 says so);
    # the walk goes on and still finds W mb1 popping before W mb0
    text = "0F0,0F1,0F2,0W2,0I0,0I1,0I2,0W1,0W0\n"
    found = {v.code: v.message for v in run_checks(load_csv_text(text)[0])}
    assert found["PP021"] == _PP021_S0
    assert found["PP006"].startswith("r0/compute/W s0 mb2 comes before r0/compute/I s0 mb2 on rank 0")
