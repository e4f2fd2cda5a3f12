"""set_auto_drain("off") stops a busy drain thread before its next call; what it had taken goes back in order.

The program runs in a child with the fake driver, under a timeout."""

import fake_cuda


def test_switching_off_stops_a_busy_drain_thread_before_its_next_call_and_keeps_the_order():
    fake_cuda.run_script("switching_off_stops_a_busy_drain_thread.py", timeout=60)
