"""The automatic drain has two modes, "thread" and "off": any other mode, "gc" included, is refused with a
ValueError that names set_auto_drain and the valid modes, and leaves the mode as it was."""

import pytest

import cuda_reclaim


@pytest.mark.parametrize("mode", ["gc", "closed", "Thread"])
def test_a_mode_other_than_thread_or_off_is_refused_naming_set_auto_drain(mode):
    before = cuda_reclaim.get_auto_drain()
    with pytest.raises(ValueError) as refused:
        cuda_reclaim.set_auto_drain(mode)
    assert str(refused.value) == f"set_auto_drain(): the mode must be one of 'thread', 'off', not {mode!r}"
    assert cuda_reclaim.get_auto_drain() == before


def test_a_str_subclass_mode_is_stored_and_returned_as_its_plain_value():
    class Mode(str):
        def __eq__(self, other):  # claims to equal anything: only its plain value counts
            return True

        __hash__ = str.__hash__

    before = cuda_reclaim.get_auto_drain()
    try:
        with pytest.raises(ValueError, match="not 'gc'"):
            cuda_reclaim.set_auto_drain(Mode("gc"))
        cuda_reclaim.set_auto_drain(Mode("off"))
        assert type(cuda_reclaim.get_auto_drain()) is str and cuda_reclaim.get_auto_drain() == "off"
        previous = cuda_reclaim.set_auto_drain(before)
        assert type(previous) is str and previous == "off"
    finally:
        cuda_reclaim.set_auto_drain(before)
