"""Stand-in for numba.cuda: ``stream()``."""


def stream():
    import fake_driver
    from numba.cuda.cudadrv.driver import Stream

    return Stream(fake_driver.new_stream())
