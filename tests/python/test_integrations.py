"""cuda_reclaim.integrations: numba-cuda's, CuPy's and cuda.core's callback methods re-pointed at cuda-reclaim.
The libraries are stand-ins with their signatures (children/integration_standins.py); each scenario runs in a
child interpreter under a timeout (children/integration_scenarios.py), against the fake libcuda where a
callback runs."""

import pytest

import fake_cuda
from conftest import run_child_script

SCENARIOS = "integration_scenarios.py"


def _run_plain(name):
    result = run_child_script(SCENARIOS, name, timeout=fake_cuda.HANG_LIMIT)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_install_uninstall_and_installed_restore_exactly_the_classes_own_attributes():
    assert _run_plain("install_uninstall_and_the_context_manager_restore_the_originals").stdout == "restored\n"


def test_uninstall_leaves_an_attribute_that_someone_else_replaced_after_install():
    _run_plain("an_attribute_replaced_by_someone_else_is_left_as_they_set_it")


def test_overlapping_installed_blocks_keep_the_integration_until_the_last_one_leaves():
    _run_plain("overlapping_installed_blocks_keep_the_integration_until_the_last_leaves")


def test_a_wrapper_left_in_place_by_uninstall_leads_to_the_librarys_own_method():
    _run_plain("a_wrapper_left_by_uninstall_leads_to_the_librarys_own_method")


def test_a_block_that_the_gc_ends_inside_another_blocks_install_does_not_hang():
    assert _run_plain("a_block_that_the_gc_ends_inside_another_install_leaves_cleanly").stdout == "clean\n"


def test_a_fork_child_installs_and_uninstalls_whatever_other_threads_held_at_the_fork():
    result = _run_plain("a_fork_child_counts_only_the_forking_threads_blocks_and_takes_the_lock_afresh")
    assert result.stdout == "child clean\n"


def test_a_compiled_class_that_refuses_setattr_is_patched_and_restored():
    _run_plain("an_immutable_type_is_patched_and_restored")


def test_numba_add_callback_calls_back_with_stream_status_and_arg_in_stream_order_before_the_stream_goes_on():
    fake_cuda.run_script(SCENARIOS, "numba_add_callback_passes_stream_status_and_arg_in_stream_order")


def test_numba_add_callback_warns_of_an_exception_as_numba_does():
    fake_cuda.run_script(SCENARIOS, "numba_add_callback_turns_an_exception_into_a_warning")


def test_numba_async_done_gives_the_stream_on_the_loop_and_leaves_a_cancelled_future_alone():
    fake_cuda.run_script(SCENARIOS, "numba_async_done_completes_on_the_loop_and_leaves_a_cancelled_future_alone")


def test_ordered_callbacks_are_refused_with_the_librarys_method_named_when_no_drain_would_run_them():
    fake_cuda.run_script(
        SCENARIOS, "ordered_callbacks_are_refused_with_the_librarys_method_named_when_no_drain_would_run_them"
    )


def test_cupy_add_callback_and_launch_host_func_pass_their_arguments_in_stream_order():
    fake_cuda.run_script(SCENARIOS, "cupy_callbacks_pass_their_arguments_in_stream_order")


def test_cupy_exceptions_reach_the_unraisablehook_before_the_stream_goes_on():
    fake_cuda.run_script(SCENARIOS, "cupy_exceptions_reach_the_unraisablehook_before_the_stream_goes_on")


def test_cupy_launch_host_func_while_capturing_is_cupys_own():
    fake_cuda.run_script(SCENARIOS, "cupy_launch_host_func_on_a_capturing_stream_is_cupys_own")


def test_cuda_core_python_callables_become_ordered_host_nodes_that_run_in_a_drain_at_every_launch():
    fake_cuda.run_script(
        SCENARIOS, "cuda_core_python_callables_become_host_nodes_that_run_in_a_drain_at_every_launch"
    )


def test_cuda_core_callback_exceptions_reach_the_unraisablehook():
    fake_cuda.run_script(SCENARIOS, "cuda_core_callback_exceptions_reach_the_unraisablehook")


def test_cuda_core_callback_of_a_python_callable_is_refused_when_no_drain_would_run_it():
    fake_cuda.run_script(SCENARIOS, "cuda_core_callback_needs_a_drain")


def test_cuda_core_host_call_runs_once_in_a_drain_before_cudas_thread_goes_on():
    fake_cuda.run_script(SCENARIOS, "cuda_core_host_call_runs_once_in_a_drain_before_cudas_thread_goes_on")


def test_cuda_core_withdraw_cancels_a_host_call_cuda_never_got_and_refuses_a_second_time():
    result = fake_cuda.run_script(SCENARIOS, "cuda_core_withdraw_cancels_a_host_call_cuda_never_got")
    assert result.stdout.startswith("withdraw(): "), "the second withdraw() is refused with an error naming it"


def test_cuda_core_host_call_is_refused_without_a_drain_and_gives_nothing_after_close():
    fake_cuda.run_script(SCENARIOS, "cuda_core_host_call_needs_a_drain_and_gives_nothing_after_close")


def test_cupy_capture_fallback_is_cupys_own_after_another_librarys_wrapper_and_a_reinstall():
    fake_cuda.run_script(SCENARIOS, "cupy_capture_fallback_is_cupys_own_after_a_wrapper_and_a_reinstall")


def test_cupy_install_that_races_an_uninstall_records_cupys_own_method():
    fake_cuda.run_script(SCENARIOS, "cupy_install_that_races_an_uninstall_records_cupys_own")


def test_racing_installs_and_uninstalls_keep_the_librarys_own_methods():
    fake_cuda.run_script(SCENARIOS, "racing_installs_and_uninstalls_keep_the_librarys_own")


def test_numba_async_done_completes_with_the_automatic_drain_off_and_after_a_switch_to_off():
    fake_cuda.run_script(SCENARIOS, "numba_async_done_completes_with_the_automatic_drain_off")


def test_numba_async_done_cancelled_before_the_stream_gets_there_runs_nothing():
    fake_cuda.run_script(SCENARIOS, "numba_async_done_cancelled_before_the_stream_gets_there_runs_nothing")


def test_numba_async_done_ends_cancelled_with_a_message_at_close_and_after_it():
    fake_cuda.run_script(SCENARIOS, "numba_async_done_ends_cancelled_at_close_and_after_it")


def test_numba_add_callback_reports_a_warning_raised_as_an_error_and_base_exceptions_as_unraisable():
    fake_cuda.run_script(SCENARIOS, "numba_add_callback_reports_what_numba_leaves_unraisable")


def test_ctrl_c_in_a_callback_that_the_main_threads_drain_runs_reaches_the_unraisablehook():
    fake_cuda.run_script(
        SCENARIOS, "ctrl_c_in_a_callback_that_the_main_threads_drain_runs_reaches_the_unraisablehook"
    )


def test_cupy_base_exceptions_reach_the_unraisablehook_before_the_stream_goes_on():
    fake_cuda.run_script(SCENARIOS, "cupy_base_exceptions_reach_the_unraisablehook_before_the_stream_goes_on")


def test_cuda_core_host_call_passes_every_keyword_to_fn_and_reports_a_base_exception():
    fake_cuda.run_script(SCENARIOS, "cuda_core_host_call_keeps_fns_keywords_and_reports_a_base_exception")


def test_the_installed_cuda_core_compiled_classes_are_patched_and_restored():
    result = _run_plain("the_real_cuda_core_classes_are_patched_and_restored")
    if result.stdout.startswith("cuda.core is not installed"):
        pytest.skip(result.stdout.strip())
    assert result.stdout == "restored\n"


def test_install_without_the_library_raises_an_import_error_naming_the_package():
    lines = _run_plain("import_errors").stdout.splitlines()
    assert lines == [
        "['cuda_reclaim.integrations.numba_cuda.install()', "
        "'numba-cuda is not installed (pip install numba-cuda[cu12])']",
        "['cuda_reclaim.integrations.cupy.install()', 'CuPy is not installed (pip install cupy-cuda12x)']",
        "['cuda_reclaim.integrations.cuda_core.install()', 'cuda.core is not installed (pip install cuda-core)']",
    ], lines


def test_importing_the_integrations_imports_none_of_the_libraries():
    assert _run_plain("nothing_heavy_at_import").stdout.strip() in ("[]", "['asyncio']")
