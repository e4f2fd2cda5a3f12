"""Stand-in for cupy.cuda.stream: ``_BaseStream`` with CuPy 14's ``add_callback(callback, arg)`` and
``launch_host_func(callback, arg)``, whose callbacks run in stream order on a thread of the stream's own (as on
CUDA's thread), and a graph capture that keeps launch_host_func's callbacks for each launch of the graph."""

import queue
import threading

import fake_driver


class _Graph:
    def __init__(self, stream, calls):
        self.stream, self.calls = stream, calls

    def upload(self):
        pass

    def launch(self):
        for callback, arg in self.calls:
            self.stream._work.put((callback, (arg,)))


class _BaseStream:
    def __init__(self, ptr, device_id=0):
        self.ptr = ptr
        self.device_id = device_id
        self._capture = None
        self._work = queue.Queue()
        threading.Thread(target=self._cuda_thread, daemon=True).start()

    def _cuda_thread(self):
        while True:
            callback, args = self._work.get()
            try:
                callback(*args)
            finally:
                self._work.task_done()

    def is_capturing(self):
        return self._capture is not None

    def begin_capture(self):
        self._capture = []

    def end_capture(self):
        calls, self._capture = self._capture, None
        return _Graph(self, calls)

    def synchronize(self):
        self._work.join()
        fake_driver.synchronize(self.ptr)

    def add_callback(self, callback, arg):
        self._work.put((callback, (self, 0, arg)))

    def launch_host_func(self, callback, arg):
        if self._capture is not None:
            self._capture.append((callback, arg))
        else:
            self._work.put((callback, (arg,)))


class Stream(_BaseStream):
    def __init__(self, non_blocking=False):
        super().__init__(fake_driver.new_stream())


class ExternalStream(_BaseStream):
    pass
