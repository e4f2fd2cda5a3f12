// tests/shutdown/torture_ext.cc — test extension `_torture` for the shutdown torture suite.
//
// Native std::threads that Python did not create keep handing Python references to a release strategy
// (A, B, C, D: the anchor designs, written here from their descriptions; R: cuda-reclaim through the
// capsule's host_destructor) while the interpreter runs, shuts down and exits. Each thread body is a
// `noexcept` C++ function, as a CUDA callback thread is, so a pthread_exit() forced unwind through it ends
// in std::terminate instead of silently killing the thread.
//
// What happened is recorded in a file-backed MAP_SHARED page (path in TORTURE_SHM) that survives the
// child, whatever way it dies: the harness reads it back with read_shared().

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "cuda_reclaim/cuda_reclaim.h"
#include "tests/python/take_references.h"

namespace {

// --- shared record -----------------------------------------------------------------------------------

constexpr int kMaxSlots = 64;

// One native thread's calls. Written only by that thread (relaxed increments); read by the exit check in
// the same process and by the harness after the process is gone.
struct Slot {
  std::atomic<std::int64_t> pid;         // owner process; 0 = unused
  std::atomic<std::uint64_t> entered;    // calls begun
  std::atomic<std::uint64_t> returned;   // calls that came back
  std::atomic<std::uint64_t> finished;   // 1 once the thread ran out of items and returned normally
};

// Every field: relaxed atomic updates by the child (any thread); the harness reads after the child exits.
struct Shared {
  std::atomic<std::uint64_t> given;          // references handed to native threads (GIL held)
  std::atomic<std::uint64_t> released;       // Token objects deallocated (any strategy)
  std::atomic<std::uint64_t> skipped;        // B/C/D: calls that declined to touch Python (silent leak)
  std::atomic<std::uint64_t> d_scheduled;    // D: Py_AddPendingCall calls that succeeded
  std::atomic<std::uint64_t> d_drains;       // D: pending-call drains that ran
  std::atomic<std::uint64_t> burst_given;    // exit burst: references armed
  std::atomic<std::uint64_t> burst_entered;  // exit burst: calls begun after Py_Finalize
  std::atomic<std::uint64_t> burst_returned; // exit burst: calls that came back
  std::atomic<std::uint64_t> killed;         // threads that ended inside a call (unwound, not aborted)
  std::atomic<std::uint64_t> stuck;          // threads still inside one call after the exit grace period
  std::atomic<std::uint64_t> exit_checked;   // 1 once the exit check ran (exit() reached the C handlers)
  std::atomic<std::int64_t> fork_child_status;  // fork scenario: os.waitpid status of the child + 1
  std::atomic<std::uint64_t> finalized_stats_valid;  // R: 1 once the Py_AtExit snapshot below is written
  std::atomic<std::uint64_t> finalized_stats[5];     // R: enqueued, released, pending, leaked, abandoned
  std::atomic<std::uint32_t> next_slot;
  Slot slots[kMaxSlots];
};

constexpr const char* kSharedFields[] = {
    "given",         "released",      "skipped", "d_scheduled", "d_drains",
    "burst_given",   "burst_entered", "burst_returned", "killed", "stuck",
    "exit_checked",
};

Shared* g_shared = nullptr;
pid_t g_setup_pid = 0;

// --- strategies ----------------------------------------------------------------------------------------

enum class Strategy { kA, kB, kC, kD, kR };
Strategy g_strategy = Strategy::kA;
const cuda_reclaim_c_api* g_api = nullptr;

int is_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// (A) what Cython's `with gil:` does around a Py_DECREF.
void release_a(PyObject* obj) noexcept {
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(obj);
  PyGILState_Release(state);
}

// (B) A, gated on Py_IsInitialized().
void release_b(PyObject* obj) noexcept {
  if (!Py_IsInitialized()) {
    g_shared->skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  release_a(obj);
}

// (C) A, gated on Py_IsInitialized() and the finalizing flag.
void release_c(PyObject* obj) noexcept {
  if (!Py_IsInitialized() || is_finalizing()) {
    g_shared->skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  release_a(obj);
}

// (D) Coalesced pending-call drain: the hand-over record carries its own link (intrusive), producers push
// it on a lock-free stack and the first one after a drain schedules a single Py_AddPendingCall; the drain
// runs on the main thread between bytecodes. Once the interpreter is finalizing nothing is scheduled.
struct DNode {
  DNode* next;
  PyObject* obj;
};
std::atomic<DNode*> g_d_head{nullptr};  // producers CAS-push (release); the drain exchanges (acquire)
std::atomic<bool> g_d_scheduled{false};  // set by the producer that schedules; cleared by the drain

Py_ssize_t d_drain_now() noexcept {
  DNode* node = g_d_head.exchange(nullptr, std::memory_order_acquire);
  Py_ssize_t count = 0;
  while (node != nullptr) {
    DNode* next = node->next;
    Py_DECREF(node->obj);
    delete node;
    node = next;
    ++count;
  }
  return count;
}

int d_pending_call(void*) noexcept {
  // Cleared first: a push that lands while this drain runs schedules the next one.
  g_d_scheduled.store(false, std::memory_order_seq_cst);
  g_shared->d_drains.fetch_add(1, std::memory_order_relaxed);
  d_drain_now();
  return 0;
}

void release_d(DNode* node) noexcept {
  if (!Py_IsInitialized() || is_finalizing()) {
    g_shared->skipped.fetch_add(1, std::memory_order_relaxed);
    return;  // stop scheduling once finalizing: the node and its reference are leaked
  }
  DNode* head = g_d_head.load(std::memory_order_relaxed);
  do {
    node->next = head;
  } while (!g_d_head.compare_exchange_weak(head, node, std::memory_order_release,
                                           std::memory_order_relaxed));
  if (!g_d_scheduled.exchange(true, std::memory_order_seq_cst)) {
    if (Py_AddPendingCall(d_pending_call, nullptr) == 0) {
      g_shared->d_scheduled.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_d_scheduled.store(false, std::memory_order_seq_cst);  // queue full: the next push retries
    }
  }
}

// One host-destructor call of the chosen strategy; `item` is what the thread was given (a PyObject*, or
// for D a DNode* holding one).
void release_one(void* item) noexcept {
  switch (g_strategy) {
    case Strategy::kA: release_a(static_cast<PyObject*>(item)); break;
    case Strategy::kB: release_b(static_cast<PyObject*>(item)); break;
    case Strategy::kC: release_c(static_cast<PyObject*>(item)); break;
    case Strategy::kD: release_d(static_cast<DNode*>(item)); break;
    case Strategy::kR: g_api->host_destructor(item); break;
  }
}

// --- native threads ------------------------------------------------------------------------------------

pthread_key_t g_slot_key;

// Runs at thread exit, including a pthread_exit() unwind that got past every frame: a thread that ends
// with a call begun and not returned was killed inside it.
void on_thread_exit(void* value) {
  auto* slot = static_cast<Slot*>(value);
  if (slot->entered.load(std::memory_order_relaxed) != slot->returned.load(std::memory_order_relaxed)) {
    g_shared->killed.fetch_add(1, std::memory_order_relaxed);
  }
}

Slot* claim_slot() noexcept {
  const std::uint32_t index = g_shared->next_slot.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxSlots) return nullptr;
  Slot* slot = &g_shared->slots[index];
  slot->pid.store(getpid(), std::memory_order_relaxed);
  return slot;
}

struct Work {
  std::vector<void*> items;
  std::size_t first;
  std::size_t step;
  int delay_us;
};

// The thread body. noexcept like a CUDA callback thread's frames: nothing may unwind through it.
void fire_items(const Work* work) noexcept {
  Slot* slot = claim_slot();
  if (slot != nullptr) pthread_setspecific(g_slot_key, slot);
  std::uint64_t random = 0x9E3779B97F4A7C15ull ^ reinterpret_cast<std::uintptr_t>(&random);
  for (std::size_t i = work->first; i < work->items.size(); i += work->step) {
    if (work->delay_us > 0) {
      random ^= random << 13;
      random ^= random >> 7;
      random ^= random << 17;
      // Jittered so that over many runs the calls land at every point of shutdown.
      std::this_thread::sleep_for(std::chrono::microseconds(random % (2 * work->delay_us + 1)));
    }
    if (slot != nullptr) slot->entered.fetch_add(1, std::memory_order_relaxed);
    release_one(work->items[i]);
    if (slot != nullptr) slot->returned.fetch_add(1, std::memory_order_relaxed);
  }
  if (slot != nullptr) slot->finished.store(1, std::memory_order_relaxed);
}

// Takes a new reference to each item of `sequence` (GIL held), wrapped as the strategy expects.
bool take_references(PyObject* sequence, std::vector<void*>* out) {
  return reclaim_test::take_references(sequence, out, [](PyObject* item) -> void* {
    if (g_strategy == Strategy::kD) return new DNode{nullptr, item};
    return item;
  });
}

// --- exit() burst and exit check -------------------------------------------------------------------------

std::vector<void*>* g_burst = nullptr;  // armed by arm_exit_burst(); fired once from exit()
int g_burst_threads = 0;

void fire_burst(const std::vector<void*>* items, std::size_t first, std::size_t step) noexcept {
  for (std::size_t i = first; i < items->size(); i += step) {
    g_shared->burst_entered.fetch_add(1, std::memory_order_relaxed);
    release_one((*items)[i]);
    g_shared->burst_returned.fetch_add(1, std::memory_order_relaxed);
  }
}

// How long the exit check waits for a thread that is inside a call to come back. Generous: CI hosts are
// loaded (2 cores, many processes); a strategy that returns at all returns in microseconds.
constexpr auto kExitGrace = std::chrono::milliseconds(2000);

// A C atexit handler: runs in exit(), after Py_Finalize returned (Py_RunMain finalizes before main()
// returns) and before the loader's fini pass, which writes cuda-reclaim's exit report.
void at_exit() {
  if (getpid() != g_setup_pid) return;  // a forked child inherits the handler, not the threads
  if (g_burst != nullptr) {
    // Like CUDA tearing down a context from a static destructor: destructors fire on other threads and
    // exit() waits for them.
    std::vector<std::thread> workers;
    for (int t = 0; t < g_burst_threads; ++t) {
      workers.emplace_back(fire_burst, g_burst, static_cast<std::size_t>(t),
                           static_cast<std::size_t>(g_burst_threads));
    }
    for (auto& worker : workers) worker.join();
  }
  // A thread that sits inside one call through the whole grace period is stuck (it hangs on a lock that
  // nobody will release, or was killed without running its exit hook).
  std::uint64_t seen[kMaxSlots];
  bool inside[kMaxSlots];
  const std::uint32_t used = std::min<std::uint32_t>(g_shared->next_slot.load(), kMaxSlots);
  for (std::uint32_t i = 0; i < used; ++i) {
    const Slot& slot = g_shared->slots[i];
    seen[i] = slot.entered.load(std::memory_order_relaxed);
    inside[i] = slot.pid.load(std::memory_order_relaxed) == g_setup_pid &&
                seen[i] != slot.returned.load(std::memory_order_relaxed);
  }
  const auto deadline = std::chrono::steady_clock::now() + kExitGrace;
  std::uint64_t stuck = 0;
  for (std::uint32_t i = 0; i < used; ++i) {
    if (!inside[i]) continue;
    const Slot& slot = g_shared->slots[i];
    while (slot.returned.load(std::memory_order_relaxed) < seen[i] &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (slot.returned.load(std::memory_order_relaxed) < seen[i]) ++stuck;
  }
  g_shared->stuck.store(stuck, std::memory_order_relaxed);
  g_shared->exit_checked.store(1, std::memory_order_relaxed);
}

// Py_AtExit: end of Py_FinalizeEx, also on the KeyboardInterrupt path that then kills the process with
// SIGINT before exit() (so no C atexit handler and no exit report). Never touches Python.
void at_finalized() {
  if (g_api == nullptr || getpid() != g_setup_pid) return;
  cuda_reclaim_stats stats;
  if (g_api->get_stats(&stats, sizeof stats) != 0) return;
  g_shared->finalized_stats[0].store(stats.enqueued);
  g_shared->finalized_stats[1].store(stats.released);
  g_shared->finalized_stats[2].store(stats.pending);
  g_shared->finalized_stats[3].store(stats.leaked_after_close);
  g_shared->finalized_stats[4].store(stats.abandoned_after_fork);
  g_shared->finalized_stats_valid.store(1);
}

// --- Token: an object whose deallocation is counted in the shared record ----------------------------------

void token_dealloc(PyObject* self) {
  if (g_shared != nullptr) g_shared->released.fetch_add(1, std::memory_order_relaxed);
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject kTokenType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// --- module functions ---------------------------------------------------------------------------------

Shared* map_shared(const char* path) {
  const int fd = open(path, O_RDWR);
  if (fd < 0) {
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    return nullptr;
  }
  if (ftruncate(fd, sizeof(Shared)) != 0) {
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    close(fd);
    return nullptr;
  }
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) {
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    return nullptr;
  }
  return static_cast<Shared*>(memory);  // a new file is all zeros: every counter starts at 0
}

// setup(strategy, shared_path): once per child, before anything else.
PyObject* setup(PyObject*, PyObject* args) {
  const char* name;
  const char* path;
  if (!PyArg_ParseTuple(args, "ss", &name, &path)) return nullptr;
  if (g_shared != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "setup() was already called");
    return nullptr;
  }
  static const struct { const char* name; Strategy strategy; } kNames[] = {
      {"A", Strategy::kA}, {"B", Strategy::kB}, {"C", Strategy::kC}, {"D", Strategy::kD},
      {"R", Strategy::kR}};
  bool found = false;
  for (const auto& entry : kNames) {
    if (std::strcmp(entry.name, name) == 0) {
      g_strategy = entry.strategy;
      found = true;
    }
  }
  if (!found) {
    PyErr_Format(PyExc_ValueError, "unknown strategy %R (expected A, B, C, D or R)",
                 PyTuple_GET_ITEM(args, 0));
    return nullptr;
  }
  if (g_strategy == Strategy::kR && cuda_reclaim_import(&g_api) < 0) return nullptr;
  Shared* shared = map_shared(path);
  if (shared == nullptr) return nullptr;
  if (pthread_key_create(&g_slot_key, on_thread_exit) != 0) {
    PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
    return nullptr;
  }
  g_shared = shared;
  g_setup_pid = getpid();
  if (std::atexit(at_exit) != 0 || Py_AtExit(at_finalized) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "cannot register the exit handlers");
    return nullptr;
  }
  Py_RETURN_NONE;
}

bool require_setup() {
  if (g_shared != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError, "call setup() first");
  return false;
}

// start(objs, threads, delay_us): detached native threads hand the objects over, one call each, with a
// jittered pause of about delay_us before each call. They outlive Python if the process lets them.
PyObject* start(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads, delay_us;
  if (!PyArg_ParseTuple(args, "Oii", &sequence, &threads, &delay_us)) return nullptr;
  if (!require_setup()) return nullptr;
  if (threads < 1 || threads > 16 || delay_us < 0) {
    PyErr_SetString(PyExc_ValueError, "threads must be in 1..16 and delay_us >= 0");
    return nullptr;
  }
  std::vector<void*> items;
  if (!take_references(sequence, &items)) return nullptr;
  g_shared->given.fetch_add(items.size(), std::memory_order_relaxed);
  for (int t = 0; t < threads; ++t) {
    // Owned by the detached thread for the life of the process (never freed: it may outlive exit()).
    auto* work = new Work{items, static_cast<std::size_t>(t), static_cast<std::size_t>(threads), delay_us};
    std::thread(fire_items, work).detach();
  }
  Py_RETURN_NONE;
}

// arm_exit_burst(objs, threads): at exit(), after Py_Finalize, `threads` native threads hand the objects
// over as fast as they can and exit() waits for them.
PyObject* arm_exit_burst(PyObject*, PyObject* args) {
  PyObject* sequence;
  int threads;
  if (!PyArg_ParseTuple(args, "Oi", &sequence, &threads)) return nullptr;
  if (!require_setup()) return nullptr;
  if (g_burst != nullptr || threads < 1 || threads > 16) {
    PyErr_SetString(PyExc_ValueError, "arm once, with threads in 1..16");
    return nullptr;
  }
  auto* items = new std::vector<void*>();  // fired from exit(); never freed
  if (!take_references(sequence, items)) {
    delete items;
    return nullptr;
  }
  g_shared->burst_given.fetch_add(items->size(), std::memory_order_relaxed);
  g_burst = items;
  g_burst_threads = threads;
  Py_RETURN_NONE;
}

// drain(): the strategy's own drain on this thread (D: the stack; R: the capsule's drain; A-C: none).
PyObject* drain(PyObject*, PyObject*) {
  if (!require_setup()) return nullptr;
  Py_ssize_t count = 0;
  if (g_strategy == Strategy::kD) count = d_drain_now();
  if (g_strategy == Strategy::kR) count = g_api->drain(-1);
  if (count < 0) return nullptr;
  return PyLong_FromSsize_t(count);
}

// note_fork_child(status): the fork scenario's parent records the child's waitpid status.
PyObject* note_fork_child(PyObject*, PyObject* args) {
  int status;
  if (!PyArg_ParseTuple(args, "i", &status)) return nullptr;
  if (!require_setup()) return nullptr;
  g_shared->fork_child_status.store(static_cast<std::int64_t>(status) + 1);
  Py_RETURN_NONE;
}

// read_shared(path) -> dict: the record a finished child left (harness side; no setup needed).
PyObject* read_shared(PyObject*, PyObject* args) {
  const char* path;
  if (!PyArg_ParseTuple(args, "s", &path)) return nullptr;
  Shared* shared = map_shared(path);
  if (shared == nullptr) return nullptr;
  PyObject* result = PyDict_New();
  bool ok = result != nullptr;
  auto put = [&](const char* key, PyObject* value) {
    if (!ok || value == nullptr || PyDict_SetItemString(result, key, value) < 0) ok = false;
    Py_XDECREF(value);
  };
  const std::atomic<std::uint64_t>* fields[] = {
      &shared->given,         &shared->released,      &shared->skipped,       &shared->d_scheduled,
      &shared->d_drains,      &shared->burst_given,   &shared->burst_entered, &shared->burst_returned,
      &shared->killed,        &shared->stuck,         &shared->exit_checked,
  };
  static_assert(sizeof fields / sizeof fields[0] == sizeof kSharedFields / sizeof kSharedFields[0],
                "one name per field");
  for (std::size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) {
    put(kSharedFields[i], PyLong_FromUnsignedLongLong(fields[i]->load()));
  }
  std::uint64_t entered = 0, returned = 0, threads = 0, finished = 0;
  const std::uint32_t used = std::min<std::uint32_t>(shared->next_slot.load(), kMaxSlots);
  for (std::uint32_t i = 0; i < used; ++i) {
    entered += shared->slots[i].entered.load();
    returned += shared->slots[i].returned.load();
    finished += shared->slots[i].finished.load();
    ++threads;
  }
  put("threads", PyLong_FromUnsignedLongLong(threads));
  put("threads_finished", PyLong_FromUnsignedLongLong(finished));
  put("entered", PyLong_FromUnsignedLongLong(entered));
  put("returned", PyLong_FromUnsignedLongLong(returned));
  const std::int64_t fork_status = shared->fork_child_status.load();
  put("fork_child_status", fork_status == 0 ? (Py_INCREF(Py_None), Py_None)
                                            : PyLong_FromLongLong(fork_status - 1));
  if (shared->finalized_stats_valid.load() != 0) {
    const char* names[] = {"enqueued", "released", "pending", "leaked_after_close",
                           "abandoned_after_fork"};
    PyObject* stats = PyDict_New();
    for (int i = 0; i < 5 && stats != nullptr; ++i) {
      PyObject* value = PyLong_FromUnsignedLongLong(shared->finalized_stats[i].load());
      if (value == nullptr || PyDict_SetItemString(stats, names[i], value) < 0) Py_CLEAR(stats);
      Py_XDECREF(value);
    }
    put("finalized_stats", stats);
  } else {
    put("finalized_stats", (Py_INCREF(Py_None), Py_None));
  }
  munmap(shared, sizeof(Shared));
  if (!ok) {
    Py_XDECREF(result);
    return nullptr;
  }
  return result;
}

PyMethodDef kMethods[] = {
    {"setup", setup, METH_VARARGS, "setup(strategy, shared_path)"},
    {"start", start, METH_VARARGS, "start(objs, threads, delay_us)"},
    {"arm_exit_burst", arm_exit_burst, METH_VARARGS, "arm_exit_burst(objs, threads)"},
    {"drain", drain, METH_NOARGS, "drain() -> int"},
    {"note_fork_child", note_fork_child, METH_VARARGS, "note_fork_child(waitpid_status)"},
    {"read_shared", read_shared, METH_VARARGS, "read_shared(path) -> dict"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torture", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__torture(void) {
  kTokenType.tp_name = "_torture.Token";
  kTokenType.tp_basicsize = sizeof(PyObject);
  kTokenType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  kTokenType.tp_dealloc = token_dealloc;
  kTokenType.tp_new = PyType_GenericNew;
  kTokenType.tp_doc = "An object whose deallocation is counted in the shared record.";
  if (PyType_Ready(&kTokenType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  Py_INCREF(&kTokenType);
  if (PyModule_AddObject(module, "Token", reinterpret_cast<PyObject*>(&kTokenType)) < 0 ||
      PyModule_AddIntConstant(module, "SHARED_SIZE", sizeof(Shared)) < 0) {
    Py_DECREF(&kTokenType);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
