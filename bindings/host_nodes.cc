// bindings/host_nodes.cc — graph host nodes (see host_calls.h and call_items.h): the _HostNode type and
// what a drain does with one firing.
//
// A node is pushed once per firing of every executable graph made from its graph; its Python lifetime is
// graph/'s native count, so CUDA's thread never changes a Python refcount.

#define PY_SSIZE_T_CLEAN
#include <new>

#include "bindings/call_items.h"

namespace reclaim_bindings {
namespace {

namespace graph = reclaim::graph;

// Created once per process and never released, as the _HostCall type (host_calls.cc).
PyTypeObject* g_host_node_type = nullptr;

void host_node_dealloc(PyObject* object) {
  auto* node = reinterpret_cast<HostNode*>(object);
  PyTypeObject* type = Py_TYPE(object);
  Py_XDECREF(node->fn);
  Py_XDECREF(node->args);
  node->slot.~HostNodeSlot();
  type->tp_free(object);
  Py_DECREF(type);
}

PyType_Slot kHostNodeSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(host_node_dealloc)},
    {Py_tp_doc, const_cast<char*>("An add_host_node function, called once per firing (private).")},
    {0, nullptr},
};

PyType_Spec kHostNodeSpec = {
    "cuda_reclaim._reclaim._HostNode", sizeof(HostNode), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kHostNodeSlots,
};

}  // namespace

bool ready_host_node_type() {
  if (g_host_node_type == nullptr) {
    g_host_node_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHostNodeSpec));
  }
  return g_host_node_type != nullptr;
}

bool is_host_node(PyObject* item) { return g_host_node_type != nullptr && Py_TYPE(item) == g_host_node_type; }

const PyTypeObject* host_node_type() noexcept { return g_host_node_type; }

HostNode* new_host_node(PyObject* fn, PyObject* args) {
  auto* node = PyObject_New(HostNode, g_host_node_type);
  if (node == nullptr) return nullptr;
  new (&node->slot) graph::HostNodeSlot();
  node->slot.payload = node;
  Py_INCREF(fn);
  Py_INCREF(args);
  node->fn = fn;
  node->args = args;
  Py_INCREF(node);  // the native count's reference
  return node;
}

void host_node_arrived(HostNode* node) {
  if (graph::host_node_entry_is_final(&node->slot)) {
    Py_DECREF(node);  // the user object went last: the native count's Python reference
    return;
  }
  ++g_call_counters.run;
  PyObject* result = PyObject_Call(node->fn, node->args, nullptr);
  if (result == nullptr) {
    PyErr_WriteUnraisable(node->fn);  // no future to carry it: a host node's result is not kept
  } else {
    Py_DECREF(result);
  }
  if (graph::host_node_call_done(&node->slot)) Py_DECREF(node);
}

}  // namespace reclaim_bindings
