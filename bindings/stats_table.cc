// bindings/counter_names.cc — see counter_names.h.

#define PY_SSIZE_T_CLEAN
#include "bindings/counter_names.h"

#include "cleanup/reclaim_abi.h"

namespace reclaim_bindings {
namespace {

// STATS_KEYS (a tuple) and STATS_DOCS (key → description), from the one counter list.
int add_stats_keys_and_docs(PyObject* module) {
#define RECLAIM_COUNT_ONE_(name, description) +1
  constexpr Py_ssize_t kCounters = 0 RECLAIM_COUNTERS(RECLAIM_COUNT_ONE_);
#undef RECLAIM_COUNT_ONE_
  static const char* const kNames[] = {
#define RECLAIM_NAME_(name, description) #name,
      RECLAIM_COUNTERS(RECLAIM_NAME_)
#undef RECLAIM_NAME_
  };
  static const char* const kDescriptions[] = {
#define RECLAIM_DESCRIPTION_(name, description) description,
      RECLAIM_COUNTERS(RECLAIM_DESCRIPTION_)
#undef RECLAIM_DESCRIPTION_
  };
  PyObject* keys = PyTuple_New(kCounters);
  PyObject* docs = PyDict_New();
  int failed = keys == nullptr || docs == nullptr;
  for (Py_ssize_t i = 0; i < kCounters && !failed; ++i) {
    PyObject* key = PyUnicode_InternFromString(kNames[i]);
    PyObject* doc = key == nullptr ? nullptr : PyUnicode_FromString(kDescriptions[i]);
    failed = doc == nullptr || PyDict_SetItem(docs, key, doc) < 0;
    Py_XDECREF(doc);
    if (failed) {
      Py_XDECREF(key);
    } else {
      PyTuple_SET_ITEM(keys, i, key);  // steals
    }
  }
  if (!failed) failed = PyModule_AddObjectRef(module, "STATS_KEYS", keys) < 0;
  if (!failed) failed = PyModule_AddObjectRef(module, "STATS_DOCS", docs) < 0;
  Py_XDECREF(keys);
  Py_XDECREF(docs);
  return failed ? -1 : 0;
}

// CONSERVATION_BUCKETS (a tuple): the counters whose sum the conservation law equates with handed_over.
// Read off the law's one definition (reclaim_stats_conserved) instead of being written out again: a counter
// is a bucket when a snapshot with one reference handed over, counted there alone, conserves.
int add_conservation_buckets(PyObject* module) {
  PyObject* buckets = PyList_New(0);
  int failed = buckets == nullptr;
#define RECLAIM_BUCKET_ITEM_(name, description)                                   \
  if (!failed) {                                                                  \
    reclaim_stats probe = {};                                                     \
    probe.handed_over = 1;                                                        \
    probe.name += 1;                                                              \
    if (reclaim_stats_conserved(&probe)) {                                        \
      PyObject* key = PyUnicode_InternFromString(#name);                          \
      failed = key == nullptr || PyList_Append(buckets, key) < 0;                 \
      Py_XDECREF(key);                                                            \
    }                                                                             \
  }
  RECLAIM_COUNTERS(RECLAIM_BUCKET_ITEM_)
#undef RECLAIM_BUCKET_ITEM_
  PyObject* tuple = failed ? nullptr : PyList_AsTuple(buckets);
  failed = tuple == nullptr || PyModule_AddObjectRef(module, "CONSERVATION_BUCKETS", tuple) < 0;
  Py_XDECREF(tuple);
  Py_XDECREF(buckets);
  return failed ? -1 : 0;
}

}  // namespace

int add_counter_names(PyObject* module) {
  return add_stats_keys_and_docs(module) < 0 || add_conservation_buckets(module) < 0 ? -1 : 0;
}

}  // namespace reclaim_bindings
