// bindings/host_nodes.cc — graph host nodes (see host_calls.h and call_items.h): making one (a _HostItem
// of kind kNode), what a drain does with one firing, and what a dying node drops.
//
// A node is pushed once per firing of every executable graph made from its graph; its Python lifetime is
// graph/'s native count, so CUDA's thread never changes a Python refcount. An ordered node's firings wait
// on gates that the drain opens once a call that began after them returned.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <new>

#include "bindings/attachments.h"
#include "bindings/call_items.h"
#include "bindings/drain.h"

namespace reclaim::bindings {
namespace {

// Ordered nodes alive, linked through previous_ordered/next_ordered (GIL).
HostNode* g_ordered_nodes = nullptr;

// The gates that the running call of an ordered node took before it began, on that call's C stack and on
// this list while the call runs (GIL): opened when it returns, by an exit that never returns to it, and
// dropped in a fork child that the call forks.
struct TakenGates {
  graph::FiringGate* gates = nullptr;
  TakenGates* previous = nullptr;
  TakenGates* next = nullptr;
  bool linked = false;
};
TakenGates* g_taken = nullptr;

void link_taken(TakenGates* taken) {
  taken->next = g_taken;
  if (g_taken != nullptr) g_taken->previous = taken;
  g_taken = taken;
  taken->linked = true;
}

void unlink_taken(TakenGates* taken) {
  if (!taken->linked) return;  // a fork child forgot it
  (taken->previous != nullptr ? taken->previous->next : g_taken) = taken->next;
  if (taken->next != nullptr) taken->next->previous = taken->previous;
  taken->linked = false;
}

void unlink_ordered(HostNode* node) {
  (node->previous_ordered != nullptr ? node->previous_ordered->next_ordered : g_ordered_nodes) =
      node->next_ordered;
  if (node->next_ordered != nullptr) node->next_ordered->previous_ordered = node->previous_ordered;
  node->previous_ordered = node->next_ordered = nullptr;
}

// An entry of an ordered node that runs no call (cancelled, final): every waiting firing goes on.
void open_waiting(HostNode* node) {
  if (node->ordered) graph::open_firing_gates(graph::take_firing_gates(&node->record));
}

}  // namespace

void open_node_gates() noexcept {
  for (HostNode* node = g_ordered_nodes; node != nullptr; node = node->next_ordered) {
    graph::open_firing_gates(graph::take_firing_gates(&node->record));
  }
  for (TakenGates* taken = g_taken; taken != nullptr; taken = taken->next) {
    graph::open_firing_gates(taken->gates);
    taken->gates = nullptr;
  }
}

void forget_node_gates_after_fork() noexcept {
  for (HostNode* node = g_ordered_nodes; node != nullptr; node = node->next_ordered) {
    (void)graph::take_firing_gates(&node->record);
  }
  while (TakenGates* taken = g_taken) {
    taken->gates = nullptr;
    unlink_taken(taken);
  }
}

void clear_host_node(HostNode* node) {
  if (node->ordered) {
    open_waiting(node);  // none: no firing is left once the last native reference went
    unlink_ordered(node);
  }
  Py_XDECREF(node->fn);
  Py_XDECREF(node->args);
  Py_XDECREF(node->kwargs);
  Py_XDECREF(node->attachment);
  node->record.~HostNodeRecord();
}

HostNode* new_host_node(PyObject* fn, PyObject* args, PyObject* kwargs, bool ordered) {
  Attachment* attachment = new_attachment("add_host_node", nullptr);
  if (attachment == nullptr) return nullptr;
  auto* node = reinterpret_cast<HostNode*>(new_host_item(HostItemKind::kNode));
  if (node == nullptr) {
    Py_DECREF(attachment);
    return nullptr;
  }
  new (&node->record) graph::HostNodeRecord();
  node->record.payload = node;
  node->record.done = &attachment->record.done;
  node->attachment = reinterpret_cast<PyObject*>(attachment);
  Py_INCREF(fn);
  Py_INCREF(args);
  Py_XINCREF(kwargs);
  node->fn = fn;
  node->args = args;
  node->kwargs = kwargs;
  node->ordered = ordered;
  node->previous_ordered = nullptr;
  node->next_ordered = nullptr;
  if (ordered) {
    node->next_ordered = g_ordered_nodes;
    if (g_ordered_nodes != nullptr) g_ordered_nodes->previous_ordered = node;
    g_ordered_nodes = node;
  }
  Py_INCREF(node);  // the native count's reference
  return node;
}

void host_node_cancelled(HostNode* node) {
  // The final entry (the user object went last) cancels no call: it only drops the native count's reference.
  if (!graph::host_node_entry_is_final(&node->record)) ++g_call_counters.cancelled;
  open_waiting(node);
  if (graph::host_node_entry_done(&node->record)) Py_DECREF(node);
}

void host_node_arrived(HostNode* node) {
  // The final entry (the user object went last) runs nothing; after close() no call runs either, also one a
  // drain that the close interrupted had taken (docs/callbacks.md): host_node_cancelled handles both.
  if (graph::host_node_entry_is_final(&node->record) || calls_stopped()) {
    host_node_cancelled(node);
    return;
  }
  ++g_call_counters.run;
  // An ordered node: the firings waiting now go on once this call returned (graph/host_calls.h).
  TakenGates taken;
  if (node->ordered) taken.gates = graph::take_firing_gates(&node->record);
  if (taken.gates != nullptr) link_taken(&taken);
  PyObject* result = PyObject_Call(node->fn, node->args, node->kwargs);
  if (result == nullptr) {
    PyErr_WriteUnraisable(node->fn);  // no future to carry it: a host node's result is not kept
  } else {
    Py_DECREF(result);
  }
  unlink_taken(&taken);
  graph::open_firing_gates(taken.gates);  // null in a fork child that the call forked
  if (graph::host_node_entry_done(&node->record)) Py_DECREF(node);
}

}  // namespace reclaim::bindings
