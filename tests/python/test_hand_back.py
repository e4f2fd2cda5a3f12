"""The hand-back barrier (wait_handed_back, flush, Attachment, NodeHandle.wait, asyncio.handed_back, the C
API's entries) against the fake libcuda: out-of-order hand-backs, attachments during the wait, close and
exit while waiting, timeouts, a finalizer that a drain runs, fork, signals, and no polling. Each scenario is a
program of children/hand_back_scenarios.py (fake_cuda.run_script)."""

import fake_cuda

SCENARIOS = "hand_back_scenarios.py"


def test_nothing_held_means_reached_at_once_and_timeouts_are_checked():
    fake_cuda.run_script(SCENARIOS, "nothing_held_means_reached_at_once_and_timeouts_are_checked")


def test_waits_for_what_was_attached_before_in_any_order_and_not_for_later_attachments():
    fake_cuda.run_script(SCENARIOS, "waits_for_what_was_attached_before_in_any_order_and_not_for_later_attachments")


def test_a_wait_in_progress_does_not_make_a_later_wait_cover_later_attachments():
    fake_cuda.run_script(SCENARIOS, "a_wait_in_progress_does_not_make_a_later_wait_cover_later_attachments")


def test_since_a_mark_waits_only_for_what_was_attached_after_it():
    fake_cuda.run_script(SCENARIOS, "since_a_mark_waits_only_for_what_was_attached_after_it")


def test_nine_epochs_held_at_once_each_keep_a_slot_and_every_wait_still_ends():
    # Each epoch that still holds a graph keeps a slot of its own: a wait from a mark on waits for what came
    # after the mark alone, and every wait ends once everything is back.
    fake_cuda.run_script(SCENARIOS, "nine_epochs_held_at_once_each_keep_a_slot_and_every_wait_still_ends")


def test_host_calls_and_host_nodes_are_waited_for_and_flush_runs_them():
    fake_cuda.run_script(SCENARIOS, "host_calls_and_host_nodes_are_waited_for_and_flush_runs_them")


def test_an_attachment_handle_waits_for_its_own_hand_back_alone():
    fake_cuda.run_script(SCENARIOS, "an_attachment_handle_waits_for_its_own_hand_back_alone")


def test_close_while_waiting_and_after_returns_false_at_once():
    fake_cuda.run_script(SCENARIOS, "close_while_waiting_and_after_returns_false_at_once")


def test_exit_while_a_thread_waits_does_not_hang():
    result = fake_cuda.run_script(SCENARIOS, "exit_while_a_thread_waits_does_not_hang")
    assert "non-daemon waiter returned False" in result.stdout, result.stdout
    assert "daemon waiter returned False" in result.stdout, result.stdout


def test_a_finalizer_that_a_drain_runs_may_wait_and_flush():
    fake_cuda.run_script(SCENARIOS, "a_finalizer_that_a_drain_runs_may_wait_and_flush")


def test_a_waiting_thread_sleeps_without_polling():
    # A thread that polled every millisecond would switch out about 200 times in the child's 0.2 s window;
    # the waiter sleeps on one futex, so its voluntary switches do not grow until a hand-back wakes it.
    fake_cuda.run_script(SCENARIOS, "a_waiting_thread_sleeps_without_polling")


def test_a_signal_interrupts_the_wait_with_its_exception():
    fake_cuda.run_script(SCENARIOS, "a_signal_interrupts_the_wait_with_its_exception")


def test_a_fork_child_does_not_wait_for_the_parents_attachments():
    fake_cuda.run_script(SCENARIOS, "a_fork_child_does_not_wait_for_the_parents_attachments")


def test_asyncio_handed_back_wakes_through_the_loop_reader():
    fake_cuda.run_script(SCENARIOS, "asyncio_handed_back_wakes_through_the_loop_reader")


def test_the_c_api_counts_other_extensions_attachments():
    fake_cuda.run_script(SCENARIOS, "the_c_api_counts_other_extensions_attachments")


# The C API's wait_handed_back (through the capsule's table) returns 0 once the queue is closed, also
# when nothing is held, as the docs say and as the Python form returns False.
def test_the_c_api_wait_after_close_is_zero_with_nothing_held():
    fake_cuda.run_script(SCENARIOS, "the_c_api_wait_after_close_is_zero_with_nothing_held")
