// bench/take_references.h — shared by the extensions whose native threads are handed Python objects
// (bench/shutdown/torture_module.cc, tests/python/native_producers.cc).
#ifndef CUDA_RECLAIM_BENCH_TAKE_REFERENCES_H_
#define CUDA_RECLAIM_BENCH_TAKE_REFERENCES_H_

#include <Python.h>

#include <vector>

namespace reclaim_bench {

// Appends to *out, for each item of `sequence`, wrap(item) after taking a new reference to the item
// (the native side then owns it). Returns false with an exception set when `sequence` is no sequence.
// Requires an attached thread state (GIL).
template <typename Wrap>
bool take_references(PyObject* sequence, std::vector<void*>* out, Wrap wrap) {
  PyObject* fast = PySequence_Fast(sequence, "expected a sequence of objects");
  if (fast == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  out->reserve(out->size() + static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    Py_INCREF(item);
    out->push_back(wrap(item));
  }
  Py_DECREF(fast);
  return true;
}

// The plain hand-over: the native side gets the PyObject* itself.
inline bool take_references(PyObject* sequence, std::vector<void*>* out) {
  return take_references(sequence, out, [](PyObject* item) -> void* { return item; });
}

}  // namespace reclaim_bench

#endif  // CUDA_RECLAIM_BENCH_TAKE_REFERENCES_H_
