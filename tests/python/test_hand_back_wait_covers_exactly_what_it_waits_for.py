"""A hand-back wait covers exactly what it waits for, under load (fake driver): a wait since a mark never waits
for the graphs that older epochs hold, a wait that returns True finds every attachment it covered done (also while
the hand-back that ends it is still running), and an Attachment's waiter is not woken by other attachments'
hand-backs. Each scenario is a program of children/hand_back_wait_covers_scenarios.py (fake_cuda.run_script)."""

import fake_cuda

SCENARIOS = "hand_back_wait_covers_scenarios.py"
SHORT = 60  # seconds: a child that has not exited by then is hung


# Six graphs held for good, one epoch each (a mark between them), then a mark: what is attached after the
# mark is waited for alone, by wait_handed_back and flush, however many older epochs still hold a graph.
# The same with a hundred such epochs. No epoch shares a slot.
def test_a_wait_since_a_mark_never_waits_for_graphs_held_in_older_epochs():
    fake_cuda.run_script(SCENARIOS, "a_wait_since_a_mark_never_waits_for_graphs_held_in_older_epochs", timeout=SHORT)


# Another thread hands an attachment back while the main thread waits for everything: whenever the wait
# returns True, the attachment it covered already says done() (its cell is set before its ticket ends).
def test_a_true_wait_finds_every_covered_attachment_done():
    fake_cuda.run_script(SCENARIOS, "a_true_wait_finds_every_covered_attachment_done", timeout=SHORT)


# Four threads wait on four attachments that stay held while a thousand other attachments are handed back:
# each waiter sleeps on its own cell's futex bucket, so it is woken a handful of times at most (a bucket
# shared by chance), never once per hand-back.
def test_attachment_waiters_are_not_woken_by_other_attachments_hand_backs():
    fake_cuda.run_script(SCENARIOS, "attachment_waiters_are_not_woken_by_other_attachments_hand_backs", timeout=SHORT)

