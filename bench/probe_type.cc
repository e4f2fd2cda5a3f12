// bench/probe_type.cc — see probe_type.h.

#include "bench/probe_type.h"

#include <chrono>

namespace reclaim_bench {
namespace {

struct Probe {
  PyObject_HEAD
  std::int64_t generation;  // the run that created it; stale probes stamp nothing
  Py_ssize_t index;
};

PyTypeObject* g_probe_type = nullptr;  // a reference held for the life of the process
std::int64_t g_generation = 0;
std::vector<std::int64_t> g_release_ns;  // written by tp_dealloc, read by the module; GIL held for both

void probe_dealloc(PyObject* self) {
  Probe* probe = reinterpret_cast<Probe*>(self);
  if (probe->generation == g_generation && probe->index >= 0 &&
      static_cast<std::size_t>(probe->index) < g_release_ns.size()) {
    g_release_ns[static_cast<std::size_t>(probe->index)] = now_ns();
  }
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // heap type: each instance holds a reference to it
}

PyType_Slot kProbeSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(probe_dealloc)}, {0, nullptr}};
PyType_Spec kProbeSpec = {"_reclaim_bench.Probe", sizeof(Probe), 0, Py_TPFLAGS_DEFAULT, kProbeSlots};

}  // namespace

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

PyTypeObject* create_probe_type() {
  g_probe_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kProbeSpec));
  return g_probe_type;
}

void begin_probe_run(std::size_t stamped) {
  ++g_generation;
  g_release_ns.assign(stamped, 0);
}

PyObject* new_probe(Py_ssize_t index) {
  Probe* probe = PyObject_New(Probe, g_probe_type);
  if (probe == nullptr) return nullptr;
  probe->generation = g_generation;
  probe->index = index;
  return reinterpret_cast<PyObject*>(probe);
}

const std::vector<std::int64_t>& release_times() { return g_release_ns; }

}  // namespace reclaim_bench
