/* cleanup/reclaim.h — C entry points of the process-wide reclaim queue (cleanup/reclaim_queue.h).
 *
 * Every function here works on the one global queue (reclaim::global_queue()), which is never destroyed.
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CUDA_RECLAIM_CLEANUP_RECLAIM_H_ */
