// bindings/attachments.h — waiting for CUDA's hand-backs: cuda_reclaim.Attachment (one attachment, as
// keep_alive() returns it and a host node's NodeHandle holds it) and the barrier builtins over the process's
// hand-back barrier (handback/process_barrier.h: wait_handed_back, and the pieces cuda_reclaim.asyncio builds
// handed_back() from).
//
// Everything here requires an attached thread state (GIL) except where a function says it releases it.

#pragma once

#include <Python.h>

#include <cstdint>

#include "graph/keep_alive.h"

namespace reclaim::bindings {

// One attachment's handle (cuda_reclaim.Attachment, immutable, not instantiable from Python). For
// keep_alive, the object itself is the payload CUDA holds (record.payload == self) and it holds `objects`;
// for a host node it only carries the node's done cell (objects null).
struct Attachment {
  PyObject_HEAD
  graph::HandBackRecord record;  // graph/'s part: its trampoline pushes record.payload, then sets record.done
  PyObject* objects;         // what CUDA keeps alive (a reference), or null
  const char* kind;          // "keep_alive", "keep_alive_until", "add_host_node"
  bool attached;             // CUDA took it: deallocation waits for record.done (the trampoline's last touch)
  std::uint64_t forks;       // the barrier's forks() when made: in a fork child it never comes back
};

// A new Attachment of `kind` (a static string) holding a reference to `objects` (may be null), with
// record.payload pointing to itself, not attached. Null with an exception set on failure. Allocates.
Attachment* new_attachment(const char* kind, PyObject* objects);

// Adds the Attachment type, wait_handed_back and the private barrier builtins to the module. Returns 0, or
// -1 with an exception set. Module init.
int add_attachment_functions(PyObject* module);

// The module's close(): shuts the process's hand-back barrier for good (every wait_handed_back,
// Attachment.wait and asyncio.handed_back that is not over returns False, now and later), then closes the
// queue with close_safely() (bindings/drain.h) and returns what it returns. The barrier first, so that a
// waiter learns of the shut before the final drain. Requires the GIL (close_safely's contract).
Py_ssize_t close_after_the_shut();

}  // namespace reclaim::bindings
