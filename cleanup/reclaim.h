/* cleanup/reclaim.h — C entry points of the process-wide reclaim queue (cleanup/reclaim_queue.h).
 *
 * Every function here works on the process-wide queue: this copy's reclaim::global_queue(), or the queue of
 * another copy of cleanup/ adopted with reclaim_adopt() (see the end of this file). Neither is ever
 * destroyed.
 * Producer functions (reclaim_push, reclaim_host_destructor) may run on any thread at any time, including
 * during exit(): they never touch Python, never block, never call CUDA.
 * Owner functions (drain, close) call the release action on the calling thread; the owner decides which
 * threads are safe for it. Plain C; no Python.h, no cuda.h. */

#ifndef CUDA_RECLAIM_CLEANUP_RECLAIM_H_
#define CUDA_RECLAIM_CLEANUP_RECLAIM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Results of reclaim_push(); same values as reclaim::PushStatus. */
enum {
  RECLAIM_QUEUED = 0,             /* stored; released by a later drain or by close */
  RECLAIM_LEAKED_AFTER_CLOSE = 1, /* queue closed: counted in leaked_after_close, never touched */
  RECLAIM_REJECTED = 2,           /* could not be stored (allocation failure): counted in rejected */
  RECLAIM_INVALID_ARGUMENT = 3    /* NULL item: nothing handed over, nothing counted */
};

/* Release action: called once per item on the draining thread. Must not unwind (C++: noexcept). */
typedef void (*reclaim_release_fn)(void* item, void* context);

/* Counter snapshot; see cleanup/reclaim_queue.h for the meaning of each field and the conservation law
 * enqueued == released + pending + leaked_after_close + abandoned_after_fork. */
typedef struct reclaim_stats {
  uint64_t enqueued;
  uint64_t released;
  uint64_t pending;
  uint64_t leaked_after_close;
  uint64_t rejected;
  uint64_t abandoned_after_fork;
  uint64_t drain_calls;
  uint64_t max_pending;
  uint64_t wakeups;
} reclaim_stats;

/* Hands `item` over to the queue. Steals it: the caller must not use it afterwards, whatever the result.
 * Returns one of the RECLAIM_* results above.
 * Any thread; never touches Python; never blocks. */
int reclaim_push(void* item);

/* CUhostFn / cudaHostFn_t-compatible destructor: pushes `user_data`. Pass it to cuUserObjectCreate,
 * cudaUserObjectCreate or cuLaunchHostFunc. Steals `user_data`.
 * Any thread; never touches Python; never blocks. */
void reclaim_host_destructor(void* user_data);

/* Releases up to `max_items` queued items (SIZE_MAX: all) with `release(item, context)` on this thread.
 * Re-entrant: `release` may push or drain again. Returns the number released; 0 when `release` is NULL.
 * Any thread, as the owner allows; never blocks. */
size_t reclaim_drain(reclaim_release_fn release, void* context, size_t max_items);

/* Final drain, then closes: later pushes are counted as leaked. Idempotent. Returns the number released
 * by this call. With a NULL `release` it closes without releasing (items stay pending).
 * Any thread, as the owner allows; may yield the CPU briefly while admitted pushes finish. */
size_t reclaim_close(reclaim_release_fn release, void* context);

/* 1 if closed, else 0. Any thread; never touches Python; never blocks. */
int reclaim_is_closed(void);

/* Approximate number of queued items. Any thread; never touches Python; never blocks. */
size_t reclaim_pending(void);

/* Copies all counters into *out. Returns 0, or -1 when `out` is NULL.
 * Any thread; never touches Python; never blocks. */
int reclaim_get_stats(reclaim_stats* out);

/* The wake-up eventfd: readable while work is pending; stable for the life of the process. Never close it.
 * Any thread; never touches Python; never blocks. */
int reclaim_wakeup_fd(void);

/* Waits until work is probably pending (1) or `timeout_ms` passes or a signal interrupts (0).
 * Negative timeout: no limit. Any thread; blocks; never touches Python (release the GIL first). */
int reclaim_wait(int timeout_ms);

/* Makes the wake-up fd readable so that a waiter returns, even with nothing pending.
 * Any thread; never touches Python; never blocks. */
void reclaim_notify(void);

/* Writes the one-line counter report to `fd` (write(2), no stdio buffering). Returns 0, or -1 on a write
 * error. Any thread; never touches Python; never blocks (beyond the write itself). */
int reclaim_write_report(int fd);

/* --- One queue per process, across copies of cleanup/ ------------------------------------------------
 *
 * Every shared object that links cleanup/ statically carries its own copy of it, with its own hidden
 * global queue (the cuda_reclaim extension exports nothing but PyInit, and Python loads extensions with
 * RTLD_LOCAL, so no symbol lookup can unify them). A process must still have one queue, one atexit hook
 * and one set of counters. So the copy that owns the queue — the cuda_reclaim extension module, which
 * drains it and closes it at exit — publishes its entry points as a table of C function pointers
 * (reclaim_queue_ops_in_use(), handed out through its capsule), and every other copy adopts that table
 * with reclaim_adopt() before its first use. From then on all reclaim_* functions above, in that copy,
 * forward to the owner's queue. The rendezvous needs no Python in the producer path: a push costs one
 * acquire load of the table pointer and an indirect call more than before.
 *
 * Only the reclaim_* functions follow an adoption; reclaim::global_queue() (C++) is always this copy's
 * own queue, so code that may end up in an adopting copy must use the functions of this header.
 *
 * ABI: the table starts with its version and size; fields are only ever appended (each append bumps
 * RECLAIM_QUEUE_OPS_VERSION), so two copies built from different releases can still share a queue. */

#define RECLAIM_QUEUE_OPS_VERSION 1

/* Each field has the contract of the reclaim_* function of the same name, except get_stats, which
 * copies min(size, the owner's sizeof(reclaim_stats)) bytes so that reclaim_stats may grow. */
typedef struct reclaim_queue_ops {
  uint32_t version; /* RECLAIM_QUEUE_OPS_VERSION of the copy that made the table */
  uint32_t size;    /* sizeof(reclaim_queue_ops) of that copy */
  int (*push)(void* item);
  void (*host_destructor)(void* user_data);
  size_t (*drain)(reclaim_release_fn release, void* context, size_t max_items);
  size_t (*close)(reclaim_release_fn release, void* context);
  int (*is_closed)(void);
  size_t (*pending)(void);
  int (*get_stats)(reclaim_stats* out, size_t size);
  int (*wakeup_fd)(void);
  int (*wait)(int timeout_ms);
  void (*notify)(void);
  int (*write_report)(int fd);
} reclaim_queue_ops;

/* The table this copy's reclaim_* functions use: the adopted one, else this copy's own queue (and from
 * this call on, nothing can be adopted any more). Static, never destroyed, never NULL. Publish it from
 * the owning copy; an adopting copy returns the owner's table, so adoptions never chain.
 * Any thread; never touches Python; never blocks (the first use of an own queue creates it). */
const reclaim_queue_ops* reclaim_queue_ops_in_use(void);

/* Makes this copy's reclaim_* functions forward to `ops` (another copy's reclaim_queue_ops_in_use()),
 * which must stay valid for the life of the process. Call it once, at load time, before anything in
 * this copy pushes or reads the queue. Returns 0 when this copy now uses `ops` (also when it already
 * did), or -1 and changes nothing when `ops` is NULL, older or smaller than this copy's table, or this
 * copy is already bound to another queue (its own, by an earlier use, or another adopted table).
 * Any thread; never touches Python; never blocks. */
int reclaim_adopt(const reclaim_queue_ops* ops);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_CLEANUP_RECLAIM_H_ */
