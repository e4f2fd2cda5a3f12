"""The meaning of each CPython private name the package uses (cuda_reclaim/_python_compat.py), pinned on every
interpreter: the day a release changes it, this fails."""

import threading

import pytest

from conftest import run_child_script

from cuda_reclaim import _python_compat


def test_a_threading_exit_hook_runs_after_the_main_thread_before_the_join_last_registered_first():
    result = run_child_script(
        "python_compat_scenarios.py", "exit_hooks_run_after_the_main_thread_before_the_join", timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["main ends", "hooks ran in the order second first", "worker released"]


def test_a_threading_exit_hook_cannot_be_registered_once_threading_shuts_down():
    result = run_child_script("python_compat_scenarios.py", "an_exit_hook_registers_another", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("refused:"), result.stdout + result.stderr


def test_rlock_is_owned_is_true_for_the_holding_thread_only():
    lock = threading.RLock()
    assert not _python_compat.rlock_is_owned(lock)
    seen_elsewhere = []
    with lock:
        with lock:
            assert _python_compat.rlock_is_owned(lock)
        assert _python_compat.rlock_is_owned(lock)  # still held once
        other = threading.Thread(target=lambda: seen_elsewhere.append(_python_compat.rlock_is_owned(lock)))
        other.start()
        other.join(30)
    assert seen_elsewhere == [False]
    assert not _python_compat.rlock_is_owned(lock)


def test_last_exception_is_the_exception_that_ended_the_main_program_when_atexit_hooks_run():
    result = run_child_script("lifecycle_scenarios.py", "the_exception_that_ended_the_main_program_at_exit")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "last exception at exit: LookupError('ends the main program')" in result.stdout.splitlines(), (
        result.stdout + result.stderr)


def test_write_type_namespace_sets_and_deletes_an_attribute_of_a_class_that_refuses_setattr():
    import array

    with pytest.raises(TypeError):
        array.array.pinned_by_the_compat_test = 1  # an extension type: setattr is refused
    instance = array.array("b")
    assert not hasattr(instance, "pinned_by_the_compat_test")  # the attribute cache has seen the miss
    _python_compat.write_type_namespace(array.array, "pinned_by_the_compat_test", 42)
    try:
        assert array.array.pinned_by_the_compat_test == 42 and instance.pinned_by_the_compat_test == 42
        assert "pinned_by_the_compat_test" in array.array.__dict__
    finally:
        _python_compat.write_type_namespace(array.array, "pinned_by_the_compat_test", None, delete=True)
    assert not hasattr(instance, "pinned_by_the_compat_test"), "the type's cache still has the deleted attribute"
    assert "pinned_by_the_compat_test" not in array.array.__dict__


def test_a_futures_lock_is_its_condition_that_every_public_method_takes():
    import concurrent.futures

    future = concurrent.futures.Future()
    lock = future._condition  # what python_compat.h's future_lock() reads
    assert isinstance(lock, threading.Condition)
    assert lock.acquire(False)  # free: a non-blocking acquire takes it
    try:
        taken = []
        other = threading.Thread(target=lambda: taken.append(lock.acquire(False)))
        other.start()
        other.join()
        assert taken == [False], "another thread took the future's lock while this one held it"
        done = []
        waiter = threading.Thread(target=lambda: done.append(future.done()))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive(), "Future.done() did not wait for the lock this thread holds"
    finally:
        lock.release()
    waiter.join()
    assert done == [False]
