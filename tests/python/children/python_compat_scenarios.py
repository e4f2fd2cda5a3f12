"""Child of test_python_compat.py: one scenario per run, named by the first argument. Each registers threading
exit hooks through cuda_reclaim._python_compat and lets the program end, so that the hooks run."""

import os
import threading

from cuda_reclaim import _python_compat

import scenario


def exit_hooks_run_after_the_main_thread_before_the_join():
    """Two hooks and a thread that is not a daemon, held until the first hook runs: the join would hang first.
    Prints "main ends", then the order the hooks ran in, then "worker released"."""
    release = threading.Event()
    order = []

    def first():
        order.append("first")
        os.write(1, ("hooks ran in the order " + " ".join(order) + "\n").encode())
        release.set()

    def second():
        order.append("second")

    def worker():
        release.wait()  # a thread that is not a daemon, held until the hook runs: the join would hang first
        os.write(1, b"worker released\n")

    _python_compat.register_threading_exit_hook(first)
    _python_compat.register_threading_exit_hook(second)
    threading.Thread(target=worker).start()
    print("main ends", flush=True)


def an_exit_hook_registers_another():
    """A hook that, while threading shuts down, registers another one: prints "refused: MESSAGE" if refused."""

    def late():
        try:
            _python_compat.register_threading_exit_hook(print)
        except RuntimeError as error:
            print("refused:", error, flush=True)

    _python_compat.register_threading_exit_hook(late)


if __name__ == "__main__":
    scenario.run(exit_hooks_run_after_the_main_thread_before_the_join, an_exit_hook_registers_another)
