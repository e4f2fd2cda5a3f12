/* abi/reclaim.h — C entry points of the process-wide reclaim queue and of the hand-back barrier, for code
 * that links //abi (which links the queue, //cleanup:queue, and the barrier, //handback).
 *
 * The queue, its counters and its entry-point table are defined once, in cuda_reclaim/reclaim_abi.h. Every
 * function here goes through the table this copy of the library uses (reclaim_api_in_use()): its own process
 * queue, or the table of the copy that owns the process's queue, adopted with reclaim_adopt(). Neither
 * queue is ever destroyed, so producers may call these during exit().
 *
 * Producer functions (reclaim_push, reclaim_host_destructor) may run on any thread at any time: they never
 * touch Python, never block, never call CUDA. Releasing is the owner's business: the owner registers its
 * safe drain with reclaim_own_process_queue() (the cuda_reclaim extension module does, with Py_DECREF).
 * Plain C; no Python.h, no cuda.h. */

#ifndef CUDA_RECLAIM_ABI_RECLAIM_H_
#define CUDA_RECLAIM_ABI_RECLAIM_H_

#include <stddef.h>
#include <stdint.h>

#include "cuda_reclaim/reclaim_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each function has the contract of the reclaim_api field of the same name (cuda_reclaim/reclaim_abi.h). */
int reclaim_push(void* item);
void reclaim_host_destructor(void* user_data);
int reclaim_is_closed(void);
size_t reclaim_pending(void);
int reclaim_wakeup_fd(void);
int reclaim_write_report(int fd);
ptrdiff_t reclaim_drain(ptrdiff_t max_items);
int reclaim_announce(void);
int reclaim_hand_back_begin(void);
void reclaim_hand_back_end(int ticket, uint32_t* done);
int reclaim_wait_handed_back(double timeout_seconds);

/* Copies all counters into *out (fields an older owner does not have read as 0). Returns 0, or -1 when
 * `out` is NULL. Any thread; never touches Python; never blocks. */
int reclaim_get_stats(reclaim_stats* out);

/* --- One queue per process, across copies of //abi ---------------------------------------------------
 *
 * Every shared object that links //abi statically carries its own copy of it (Python loads extensions
 * with RTLD_LOCAL, so no symbol lookup can unify them). The copy that owns the process's queue — the
 * cuda_reclaim extension module — publishes its table through its capsule; every other copy adopts that
 * table before its first use. A push then costs one acquire load of the table pointer and an indirect
 * call more. */

/* The table this copy's reclaim_* functions use: the adopted one, else this copy's own process queue's
 * (and from this call on, nothing can be adopted any more). Static, never destroyed, never NULL.
 * Any thread; never touches Python; never blocks (the first use of an own queue creates it). */
const reclaim_api* reclaim_api_in_use(void);

/* Makes this copy's reclaim_* functions forward to `api` (the owner's table), which must stay valid for
 * the life of the process. Call it once, at load time, before anything in this copy pushes or reads the
 * queue. Returns 0 when this copy now uses `api` (also when it already did), or -1 and changes nothing
 * when `api` is NULL, older or smaller than this copy's table, has a NULL entry, or this copy is already
 * bound to another queue (its own, by an earlier use, or another adopted table).
 * Any thread; never touches Python; never blocks. */
int reclaim_adopt(const reclaim_api* api);

/* How the owner of the process queue releases items and learns about new users; the table's drain and
 * announce call these. */
typedef struct reclaim_owner {
  ptrdiff_t (*drain)(ptrdiff_t max_items); /* releases in the owner's safe context */
  int (*announce)(void);                    /* a new user will hand items over */
} reclaim_owner;

/* Binds this copy to its own process queue (as reclaim_api_in_use() does) and makes `owner` the one
 * whose drain and announce the table calls. Returns 0, or -1 when this copy adopted another's queue (then
 * it owns nothing) or `owner` is NULL or incomplete. `owner` must stay valid for the life of the process.
 * Until an owner is set, drain releases nothing and announce does nothing (both return 0).
 * Call once, at load time. Any thread; never touches Python; never blocks. */
int reclaim_own_process_queue(const reclaim_owner* owner);

#ifdef __cplusplus
} /* extern "C" */

extern "C++" {  // C++ linkage also where the header is included inside an extern "C" block
namespace reclaim {
class ReclaimQueue;  // cleanup/reclaim_queue.h

// The process-wide queue of this copy of the library, for the code that owns it (drains and closes it):
// binds this copy's reclaim_* functions to it (from then on nothing can be adopted) and returns it;
// nullptr when this copy already adopted another copy's queue, whose owner is elsewhere. Created on first
// use and never destroyed (no static destructor runs on it), so a push during exit() or after Py_Finalize
// is safe; its fork handler (pthread_atfork, child side) resets it (ReclaimQueue::reset_after_fork_in_child).
// Capacity: CUDA_RECLAIM_RESERVED_CAPACITY at first use, else QueueOptions' default. Call it once from a
// known context (module init) before producers can run: the first call allocates.
// Any thread; never touches Python; never blocks after the first call.
ReclaimQueue* own_process_queue() noexcept;
}  // namespace reclaim
}  /* extern "C++" */
#endif

#endif /* CUDA_RECLAIM_ABI_RECLAIM_H_ */
