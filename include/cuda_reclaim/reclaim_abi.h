/* reclaim_abi.h — the one binary interface of the process-wide reclaim queue: its counters, push results
 * and the table of entry points that every copy of the code in a process shares.
 *
 * Plain C; no Python.h, no cuda.h. cleanup/ implements it; the installed package carries it next to the C
 * API header cuda_reclaim/cuda_reclaim.h, which includes it (cuda_reclaim.get_include()).
 *
 * One rendezvous: the cuda_reclaim extension module owns the queue and publishes this table through its
 * capsule `cuda_reclaim._reclaim._C_API`. Extensions read it with cuda_reclaim_import()
 * (cuda_reclaim/cuda_reclaim.h); an extension that links its own copy of cleanup/ under Bazel adopts the
 * same table (reclaim_adopt() in cleanup/reclaim.h), so that its reclaim_* functions use the module's
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

/* The counters, defined once: X(name, description). Every other list of them (the C and C++ structs,
 * Python's stats() and STATS_KEYS, the exit report, the Cython declarations' check) is derived from this
 * one, in this order. Fields are only ever appended. The conservation law, exact whenever nothing is in
 * flight (no push between its count and its enqueue, no drain between its dequeue and its count; a
 * closed queue has no push in flight once its close has returned, whatever arrives after it):
 *     handed_over == released + pending + in_drain + leaked_after_close + abandoned_after_fork
 * in_drain is what a drain has taken off the queue and not yet finished releasing: its release action is
 * still running (possibly for good, in a thread that exit stopped in the middle of a call).            */
#define RECLAIM_COUNTERS(X)                                                                              \
  X(handed_over, "references handed over and accepted: queued, or counted as leaked because the queue " \
                 "was closed (a rejected hand-over is not in it)")                                        \
  X(released, "references whose release by a drain or by close() has finished (a call: it ran)")       \
  X(pending, "queued now (read from the queue itself, never derived from the other counters)")         \
  X(leaked_after_close, "handed over after close(): counted, never touched, never released")            \
  X(rejected, "could not be stored (allocation failure; also the rest of a batch whose release "      \
              "unwound, when it cannot be put back): counted apart, leaked")                             \
  X(abandoned_after_fork, "queued in the parent when this process forked; the child never releases them") \
  X(nonempty_drains, "drains (and closes) that released at least one reference")                        \
  X(max_pending, "highest pending seen by a drain, close or counter read (a high-water mark)")          \
  X(eventfd_writes, "writes to the wake-up fd: one per empty-to-non-empty edge")                        \
  X(in_drain, "taken off the queue by a drain that has not finished releasing them (a gauge, like "     \
              "pending; at exit: what a drain took and never finished)")                                 \
  X(trims, "times trim() gave a burst's memory back (by hand, or the drain thread's own)")

/* Counter snapshot; see RECLAIM_COUNTERS for what each field holds. */
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
   * Any thread; never touches Python; never blocks. */
  int (*get_stats)(reclaim_stats* out, size_t size);

  /* 1 once the queue is closed (the process is exiting), else 0.
   * Any thread; never touches Python; never blocks. */
  int (*is_closed)(void);

  /* Approximate number of queued items. Any thread; never touches Python; never blocks. */
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
   * interrupted the wait (check your signals and call again). Sleeps on a futex that the ending hand-back
   * wakes: no polling. Never touches Python: release the GIL around it. Not on a CUDA callback thread (it
   * would wait for itself). */
  int (*wait_handed_back)(double timeout_seconds);
} reclaim_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_RECLAIM_ABI_H_ */
