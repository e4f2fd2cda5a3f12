// bindings/host_nodes.cc — graph host nodes (see host_calls.h and call_items.h): making one (a _HostItem
// of kind kNode), what a drain does with one firing, and what a dying node drops.
//
// A node is pushed once per firing of every executable graph made from its graph; its Python lifetime is
// graph/'s native count, so CUDA's thread never changes a Python refcount.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <new>

#include "bindings/attachments.h"
#include "bindings/call_items.h"
#include "bindings/drain.h"

namespace reclaim::bindings {
void clear_host_node(HostNode* node) {
  Py_XDECREF(node->fn);
  Py_XDECREF(node->args);
  Py_XDECREF(node->kwargs);
  Py_XDECREF(node->attachment);
  node->slot.~HostNodeSlot();
}

HostNode* new_host_node(PyObject* fn, PyObject* args, PyObject* kwargs) {
  Attachment* attachment = new_attachment("add_host_node", nullptr);
  if (attachment == nullptr) return nullptr;
  auto* node = reinterpret_cast<HostNode*>(new_host_item(HostItemKind::kNode));
  if (node == nullptr) {
    Py_DECREF(attachment);
    return nullptr;
  }
  new (&node->slot) graph::HostNodeSlot();
  node->slot.payload = node;
  node->slot.done = &attachment->slot.done;
  node->attachment = reinterpret_cast<PyObject*>(attachment);
  Py_INCREF(fn);
  Py_INCREF(args);
  Py_XINCREF(kwargs);
  node->fn = fn;
  node->args = args;
  node->kwargs = kwargs;
  Py_INCREF(node);  // the native count's reference
  return node;
}

void host_node_cancelled(HostNode* node) {
  // The final entry (the user object went last) cancels no call: it only drops the native count's reference.
  if (!graph::host_node_entry_is_final(&node->slot)) ++g_call_counters.cancelled;
  if (graph::host_node_entry_done(&node->slot)) Py_DECREF(node);
}

void host_node_arrived(HostNode* node) {
  // The final entry (the user object went last) runs nothing; after close() no call runs either, also one a
  // drain that the close interrupted had taken (docs/callbacks.md): host_node_cancelled handles both.
  if (graph::host_node_entry_is_final(&node->slot) || calls_closed()) {
    host_node_cancelled(node);
    return;
  }
  ++g_call_counters.run;
  PyObject* result = PyObject_Call(node->fn, node->args, node->kwargs);
  if (result == nullptr) {
    PyErr_WriteUnraisable(node->fn);  // no future to carry it: a host node's result is not kept
  } else {
    Py_DECREF(result);
  }
  if (graph::host_node_entry_done(&node->slot)) Py_DECREF(node);
}

}  // namespace reclaim::bindings
