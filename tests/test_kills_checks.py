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
