/* reclaim_abi.h — the one binary interface of the process-wide reclaim queue: its counters, push results
 * and the table of entry points that every copy of the code in a process shares.
 *
 * Plain C; no Python.h, no cuda.h. abi/ implements it; the installed package carries it next to the C
 * API header cuda_reclaim/cuda_reclaim.h, which includes it (cuda_reclaim.get_include()).
 *
 * One rendezvous: the cuda_reclaim extension module owns the queue and publishes this table through its
 * capsule `cuda_reclaim._reclaim._C_API`. Extensions read it with cuda_reclaim_import()
 * (cuda_reclaim/cuda_reclaim.h); an extension that links its own copy of cleanup/ under Bazel adopts the
 * same table (reclaim_adopt() in abi/reclaim.h), so that its reclaim_* functions use the module's
 * queue. One queue, one atexit hook, one set of counters per process.
 *
 * ABI rules: the table starts with its version and size; fields are only ever appended, each append bumps
 * RECLAIM_ABI_VERSION, and no field changes meaning. reclaim_stats is only ever appended to as well;
 * get_stats copies min(size, the owner's size) bytes. ABI 1 is the first public one.
 *
 * Memory ordering: everything a thread wrote before push(p) is visible to the thread that releases p. */

#ifndef CUDA_RECLAIM_RECLAIM_ABI_H_
#define CUDA_RECLAIM_RECLAIM_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RECLAIM_ABI_VERSION 1

/* The counters of cuda_reclaim.stats(), defined once, in the order of stats(): R(X, name, kind, source, help,
 * description), where R is the row expander and X the caller's macro (RECLAIM_COUNTER_TABLE and
 * RECLAIM_COUNTERS below pass them). Every other list of the counters is derived from this one (reclaim_stats
 * and the C++ snapshot, stats() and cuda_reclaim.COUNTERS, the Prometheus kinds and help lines, the exit
 * report) or checked against it (the Cython declarations, the API reference's table, graph/'s counters).
 * Rows are only ever appended to their source.
 *   kind: counter (only grows: its rate means something), gauge (a level that goes up and down) or
 *         high_water_mark (the highest level seen: it never goes down, but it is a level to read beside
 *         another, not a count; exported as a gauge).
 *   source: where the value is read. queue: the queue's own counters, the fields of reclaim_stats in this
 *         order; origin: handed_over split by where its references came from (every accepted hand-over is
 *         counted under exactly one, so they sum to handed_over whenever no hand-over is in flight); cuda:
 *         what CUDA took and gave back (attached_to_cuda == handed_back_by_cuda + held_by_cuda whenever no
 *         attach and no CUDA callback is in flight); calls: the Python calls of launch_host_func() and
 *         add_host_node(). The exit report has the queue's and cuda's rows.
 *   help: one short line (a metric's HELP); description: what it counts, in full.
 * The conservation law, exact whenever nothing is in flight (no push between its count and its enqueue, no
 * drain between its dequeue and its count; a closed queue has no push in flight once its close has returned,
 * whatever arrives after it):
 *     handed_over == released + pending + in_drain + leaked_after_close + abandoned_after_fork
 * in_drain is what a drain has taken off the queue and not yet finished releasing: its release action is
 * still running (possibly for good, in a thread that exit stopped in the middle of a call).                */
#define RECLAIM_QUEUE_ROWS_(R, X)                                                                             \
  /* Every accepted hand-over adds one; nothing takes any away. */                                           \
  R(X, handed_over, counter, queue, "references handed over and accepted (queued or leaked after close)",     \
    "references handed over and accepted: queued, or counted as leaked because the queue was closed (a "     \
    "rejected hand-over is not in it)")                                                                      \
  R(X, released, counter, queue, "references released by a drain or by close()",                             \
    "references whose release by a drain or by close() has finished (a call: it ran)")                       \
  /* The queue's length now: drains take it down. */                                                         \
  R(X, pending, gauge, queue, "references queued now",                                                        \
    "queued now (read from the queue itself, never derived from the other counters)")                        \
  R(X, leaked_after_close, counter, queue, "references handed over after close(), leaked on purpose",         \
    "handed over after close(): counted, never touched, never released")                                     \
  R(X, rejected, counter, queue, "hand-overs that could not be stored",                                       \
    "could not be stored (allocation failure; also the rest of a batch whose release unwound, when it "      \
    "cannot be put back): counted apart; leaked, except a defer_release() whose caller keeps its reference")  \
  /* Set (not added to) in each fork child, and a drain that the forking thread was inside takes what it     \
   * settles back out of it: it goes down, so it is a level. */                                              \
  R(X, abandoned_after_fork, gauge, queue, "references the parent had queued when this process forked",       \
    "queued in the parent when this process forked; the child never releases them")                         \
  R(X, nonempty_drains, counter, queue, "drains and closes that released at least one reference",             \
    "drains (and closes) that released at least one reference")                                              \
  /* Raised, never lowered: the highest pending seen, a level to read beside pending, not a count. */        \
  R(X, max_pending, high_water_mark, queue, "highest number of references queued at once",                    \
    "highest pending seen by a drain, close or counter read (a high-water mark)")                            \
  R(X, eventfd_writes, counter, queue, "writes to the wake-up fd",                                            \
    "writes to the wake-up fd: one per empty-to-non-empty edge")                                             \
  /* Taken by a drain and not yet released: drains settle it back to zero. */                                \
  R(X, in_drain, gauge, queue, "references a drain took and has not finished releasing",                      \
    "taken off the queue by a drain that has not finished releasing them (a gauge, like pending; at exit: "  \
    "what a drain took and never finished)")                                                                 \
  R(X, trims, counter, queue, "times trim() freed a burst's memory",                                          \
    "times trim() freed a burst's memory (by hand, or the drain thread's own)")
/* Each count by origin only grows (direct_pushes too: each read reports at least the one before). */
#define RECLAIM_ORIGIN_ROWS_(R, X)                                                                            \
  R(X, graph_user_objects, counter, origin, "references handed over by graph user objects' destructors",      \
    "handed over by a graph user object's destructor (keep_alive, and a host node's function when its graph " \
    "is gone)")                                                                                              \
  R(X, stream_host_functions, counter, origin, "references handed over by keep_alive_until() host functions", \
    "handed over by a keep_alive_until() host function")                                                     \
  R(X, host_calls, counter, origin, "launch_host_func() calls handed over",                                   \
    "pushes by launch_host_func host functions (one per call)")                                              \
  R(X, host_node_calls, counter, origin, "host-node firings handed over",                                     \
    "pushes by host-node firings (one per firing of a node in a launched graph)")                            \
  R(X, direct_pushes, counter, origin, "references handed over by defer_release() and the C API",             \
    "everything else: defer_release(), the C API capsule (handed_over minus the sources above; a lower "     \
    "bound while a CUDA hand-over is in flight)")
/* Attached and handed back only grow; what CUDA holds is their difference, a level. */
#define RECLAIM_CUDA_ROWS_(R, X)                                                                              \
  R(X, attached_to_cuda, counter, cuda, "payloads attached to CUDA",                                          \
    "payloads CUDA took: keep_alive user objects, keep_alive_until host functions, launch_host_func calls, "  \
    "add_host_node functions")                                                                               \
  R(X, handed_back_by_cuda, counter, cuda, "payloads CUDA handed back",                                       \
    "payloads CUDA gave back: trampolines that handed them to the queue (queued, leaked after close or "     \
    "rejected), host-node payloads whose user object is gone")                                               \
  R(X, held_by_cuda, gauge, cuda, "payloads CUDA holds now", "attached and not yet handed back (a gauge)")
#define RECLAIM_CALL_ROWS_(R, X)                                                                              \
  R(X, calls_run, counter, calls, "calls run in a drain",                                                     \
    "launch_host_func() calls and host-node firings that ran in a drain (an exception counts: the call ran)") \
  R(X, calls_cancelled, counter, calls, "calls that never will run",                                          \
    "calls that never will run: futures cancelled first, close(), a fork child, host-node firings after "    \
    "close()")                                                                                               \
  /* Neither run nor cancelled yet: each call leaves it once it runs or is cancelled. */                     \
  R(X, calls_outstanding, gauge, calls, "launch_host_func() calls neither run nor cancelled yet",             \
    "launch_host_func() calls neither run nor cancelled yet (a gauge)")                                      \
  R(X, calls_parked, counter, calls, "launch_host_func() calls that waited for earlier calls of their stream", \
    "launch_host_func() calls that a drain took before their turn on their stream, and that waited for the "  \
    "calls before them")

#define RECLAIM_TABLE_ROW_(X, name, kind, source, help, description) X(name, kind, source, help, description)
#define RECLAIM_ABI_ROW_(X, name, kind, source, help, description) X(name, description)

/* Every counter: X(name, kind, source, help, description), in the order of stats(). */
#define RECLAIM_COUNTER_TABLE(X)                                                                              \
  RECLAIM_QUEUE_ROWS_(RECLAIM_TABLE_ROW_, X)                                                                  \
  RECLAIM_ORIGIN_ROWS_(RECLAIM_TABLE_ROW_, X)                                                                 \
  RECLAIM_CUDA_ROWS_(RECLAIM_TABLE_ROW_, X)                                                                   \
  RECLAIM_CALL_ROWS_(RECLAIM_TABLE_ROW_, X)

/* The queue's counters (the table's rows of source queue): X(name, description), the fields of reclaim_stats. */
#define RECLAIM_COUNTERS(X) RECLAIM_QUEUE_ROWS_(RECLAIM_ABI_ROW_, X)

/* Counter snapshot: the table's rows of source queue; see RECLAIM_COUNTER_TABLE for what each field holds. */
typedef struct reclaim_stats {
#define RECLAIM_STATS_FIELD_(name, description) uint64_t name;
  RECLAIM_COUNTERS(RECLAIM_STATS_FIELD_)
#undef RECLAIM_STATS_FIELD_
} reclaim_stats;

/* The conservation law, written once. 1 when it holds for `stats`, else 0. */
static inline int reclaim_stats_conserved(const reclaim_stats* stats) {
  return stats->handed_over == stats->released + stats->pending + stats->in_drain +
                                   stats->leaked_after_close + stats->abandoned_after_fork;
}

/* Results of push(). */
enum {
  RECLAIM_QUEUED = 0,             /* stored; released later in a safe context */
  RECLAIM_LEAKED_AFTER_CLOSE = 1, /* queue closed: counted in leaked_after_close, never touched */
  RECLAIM_REJECTED = 2,           /* could not be stored (allocation failure): counted in rejected */
  RECLAIM_INVALID_ARGUMENT = 3    /* NULL item: nothing handed over, nothing counted */
};

/* The width of a hand-back ticket plus one: a ticket (hand_back_begin) is 0 to 2^16 - 2, so that a
 * ticket plus one (0 for "no ticket") fits in this many bits of whatever carries it. */
#define RECLAIM_HAND_BACK_TICKET_BITS 16

/* The table. Each entry states who may call it. */
typedef struct reclaim_api {
  uint32_t abi_version; /* RECLAIM_ABI_VERSION of the copy that made the table */
  uint32_t struct_size; /* sizeof(reclaim_api) of that copy */

  /* Hands `item` over (for the cuda_reclaim module: a PyObject* whose reference it steals). Steals it,
   * whatever the result. Returns one of RECLAIM_*.
   * Any thread; never touches Python; never blocks. */
  int (*push)(void* item);

  /* CUhostFn / cudaHostFn_t-compatible destructor: pushes `user_data`. For cuUserObjectCreate,
   * cudaUserObjectCreate and cuLaunchHostFunc. Steals `user_data`; NULL is ignored.
   * Any thread; never touches Python; never blocks. */
  void (*host_destructor)(void* user_data);

  /* Releases up to `max_items` queued items (negative: all) on this thread, in the owner's safe context:
   * for the cuda_reclaim module, Py_DECREF with finalizer exceptions sent to sys.unraisablehook, and
   * nothing once the interpreter finalizes. Returns the number released (never fails).
   * Requires the owner's context: for the cuda_reclaim module, an attached thread state (GIL). */
  ptrdiff_t (*drain)(ptrdiff_t max_items);

  /* Copies min(size, the owner's sizeof(reclaim_stats)) bytes of counters into *out (pass
   * sizeof(reclaim_stats)). Returns 0, or -1 when `out` is NULL.
   * Any thread; never touches Python; never blocks, except for the moment a trim on another thread
   * replaces the queue's storage. */
  int (*get_stats)(reclaim_stats* out, size_t size);

  /* 1 once the queue is closed (the process is exiting), else 0.
   * Any thread; never touches Python; never blocks. */
  int (*is_closed)(void);

  /* Approximate number of queued items. Any thread; never touches Python; never blocks, except for the
   * moment a trim on another thread replaces the queue's storage. */
  size_t (*pending)(void);

  /* The wake-up eventfd: readable while work is pending; stable for the life of the process (also across
   * fork). Never close it. Any thread; never touches Python; never blocks. */
  int (*wakeup_fd)(void);

  /* Writes the one-line counter report to `fd` (write(2), no stdio). Returns 0, or -1 on a write error.
   * Any thread; never touches Python; never blocks (beyond the write itself). */
  int (*write_report)(int fd);

  /* Tells the owner that a new user will hand items over, so that it drains them without being asked:
   * for the cuda_reclaim module, it starts the automatic drain (lazily, as a Python-side hand-over does).
   * cuda_reclaim_import() calls it. Returns 0, or -1 with the owner's error set (a Python exception).
   * Requires the owner's context (GIL). */
  int (*announce)(void);

  /* --- the hand-back barrier: know when CUDA has given back what was attached, without polling ---------
   * An attachment is anything a CUDA callback of yours will hand over later (a user object's destructor,
   * a host function). Count it with hand_back_begin() before the callback can run, and end it in the
   * callback (after its push), so that wait_handed_back() can wait for it. cuda_reclaim's own attachments
   * (keep_alive, launch_host_func, host nodes) are counted the same way. */

  /* Counts one attachment; returns its ticket (0 to 65534), to pass to hand_back_end. The tickets in use
   * at once stay few (about one per epoch that still holds an attachment); 65534 is the bound.
   * Any thread; never touches Python; never blocks. */
  int (*hand_back_begin)(void);

  /* When `done` is not NULL, first stores 1 into it (an atomic seq_cst store; the caller may wait for it)
   * and never touches its memory afterwards; then ends the attachment of `ticket` (its hand-back, or the
   * undo of an attachment CUDA never took). A wait_handed_back() that returns 1 thus finds the cell of
   * every attachment it covered set. Wakes waiters only when a wait may be over. Any thread (CUDA's);
   * never touches Python; never blocks. A ticket of -1 ends nothing (the cell is still set). */
  void (*hand_back_end)(int ticket, uint32_t* done);

  /* Waits until everything whose hand_back_begin() returned before this call has ended: returns 1. Returns
   * 0 when `timeout_seconds` passed (negative: no limit) or the barrier is shut (before the call, whatever
   * is held, or while waiting: the owner shuts it when it closes the queue; the cuda_reclaim module, earlier,
   * at threading's exit, so that waiting threads end before they are joined), and -1 when a signal
   * interrupted the wait, so that the caller can check its signals (Ctrl-C). A new call is a new wait: it
   * covers what was attached by then, with its full timeout. Sleeps on a futex that the ending hand-back
   * wakes: no polling. Never touches Python: release the GIL around it. Not on a CUDA callback thread (it
   * would wait for itself). */
  int (*wait_handed_back)(double timeout_seconds);
} reclaim_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_RECLAIM_ABI_H_ */
