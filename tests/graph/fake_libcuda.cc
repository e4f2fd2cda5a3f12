// tests/graph/fake_libcuda.cc — a stand-in libcuda.so.1 for tests on machines without a GPU.
//
// Loaded through CUDA_RECLAIM_LIBCUDA (Python) or load_driver(path) (GoogleTest), it implements just the
// entry points graph/ resolves, with graphs, user objects, host nodes, executable graphs and streams as
// plain host objects, and lets the test choose what fails and when destructors and host functions run.
// Its controls are the fake_cuda_* functions below (ctypes or dlsym). Load-time behaviour comes from the
// environment, read at each cuDriverGetVersion / cuGetProcAddress call: FAKE_CUDA_VERSION (default 13000),
// FAKE_CUDA_HIDE (one entry point to hide), FAKE_CUDA_INIT_ERROR (a CUresult for cuInit to return),
// FAKE_CUDA_NO_PROC_ADDRESS_V2=1 (behave as a driver without cuGetProcAddress_v2: the v1 one is used).
// Devices, read at each call: FAKE_CUDA_DEVICE_COUNT (default 1) devices named "Fake CUDA Device N", of
// compute capability 9.0 and 80 GiB; FAKE_CUDA_DEVICE_ERROR (a CUresult for cuDeviceGetName to return).
// As in CUDA, the device calls fail with CUDA_ERROR_NOT_INITIALIZED until a cuInit succeeded.
//
// Streams: every handle is a stream with a FIFO of work (host functions, host-node firings of launched
// executable graphs, "kernels" that only take time). Work runs either when the test says so
// (fake_cuda_run_host_functions: everything runnable, on a fresh thread that is joined) or, once
// fake_cuda_start_threads(n) was called, on n persistent "CUDA threads" that run each stream's work in
// order, one item at a time, possibly on a different thread for each item (as CUDA may), until the process
// is gone: they keep running through Py_Finalize and exit(), like CUDA's own threads. A held stream
// (fake_cuda_stream_hold) runs nothing until released. All state is allocated once and never destroyed,
// so those threads never meet a destroyed object at exit.

#include <cuda.h>

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; a driver exports both, under their own names.
#undef cuGetProcAddress

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct FakeUserObject {
  void* ptr;
  CUhostFn destroy;
  int references;
};

struct Call {
  CUhostFn fn;
  void* data;
};

struct FakeGraph;

struct FakeNode {
  FakeGraph* graph;
  Call call;
};

struct FakeGraph {
  std::vector<FakeUserObject*> objects;  // one entry per reference the graph owns
  std::vector<FakeNode*> nodes;          // host nodes in the order added (a valid topological order)
};

// An executable graph: its own reference to each of the graph's user objects, and a copy of its host
// nodes. As in CUDA, destroying it while launches are still queued defers the release of its references
// until the last of them completes (on the thread that completes it).
struct FakeExec {
  std::vector<FakeUserObject*> objects;
  std::vector<Call> nodes;
  int launches_in_flight = 0;
  bool destroyed = false;
};

// One item of a stream's work.
struct Work {
  enum Kind { kHostFunction, kSleep, kLaunchDone } kind;
  Call call;             // kHostFunction
  unsigned sleep_us;     // kSleep: a "kernel" that only takes time
  FakeExec* exec;        // kLaunchDone: one launch of `exec` has finished
};

struct FakeStream {
  std::deque<Work> work;
  bool held = false;
  bool busy = false;  // a thread is running the head item
};

// Everything mutable, allocated once and never destroyed (see the header comment).
struct State {
  std::mutex mutex;
  std::condition_variable changed;  // work added, a stream released, an item finished
  bool defer_destructors = false;   // release: run destructors now (false) or at fake_cuda_run_deferred()
  std::vector<Call> deferred;       // destructors waiting for a "CUDA thread"
  std::map<CUstream, FakeStream> streams;
  int threads = 0;                  // persistent CUDA threads started
  unsigned long long items_run = 0;  // host functions and host-node firings run so far
};

State& state() {
  static State* const instance = [] {
    auto* created = new State;
    // A fork child must not inherit the mutex locked by a CUDA thread that does not exist there.
    pthread_atfork([] { state().mutex.lock(); }, [] { state().mutex.unlock(); }, [] { state().mutex.unlock(); });
    return created;
  }();
  return *instance;
}

FakeGraph g_failing_graph;  // cuGraphRetainUserObject fails on this one (never destroyed: trivial members)
// Streams are handles; these two are special: one is capturing into g_capture_graph, one fails launches.
FakeGraph* g_capture_graph = nullptr;
const CUstream kCapturingStream = reinterpret_cast<CUstream>(0xCA97);
const CUstream kFailingStream = reinterpret_cast<CUstream>(0xBAD);

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

bool hidden(const char* symbol) {
  const char* hide = std::getenv("FAKE_CUDA_HIDE");
  return hide != nullptr && std::strcmp(hide, symbol) == 0;
}

// Drops `count` references; runs (or defers) the destructor at zero. Called with the state's mutex NOT
// held, so a destructor may call back into the fake.
void release(FakeUserObject* object, int count) {
  State& s = state();
  bool destroy = false;
  bool defer = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    object->references -= count;
    destroy = object->references == 0;
    defer = s.defer_destructors;
    if (destroy && defer) s.deferred.push_back(Call{object->destroy, object->ptr});
  }
  if (destroy) {
    if (!defer) object->destroy(object->ptr);
    delete object;
  }
}

void release_exec(FakeExec* exec) {
  for (FakeUserObject* object : exec->objects) release(object, 1);
  delete exec;
}

// Runs one work item; the mutex is not held. Returns true for a host function or node firing.
bool run(const Work& work) {
  switch (work.kind) {
    case Work::kHostFunction:
      work.call.fn(work.call.data);
      return true;
    case Work::kSleep:
      usleep(work.sleep_us);
      return false;
    case Work::kLaunchDone: {
      bool release_now = false;
      {
        std::lock_guard<std::mutex> lock(state().mutex);
        release_now = --work.exec->launches_in_flight == 0 && work.exec->destroyed;
      }
      if (release_now) release_exec(work.exec);
      return false;
    }
  }
  return false;
}

// A stream whose head item may run now (not held, not busy), or null. Mutex held.
FakeStream* runnable(State& s) {
  for (auto& entry : s.streams) {
    FakeStream& stream = entry.second;
    if (!stream.held && !stream.busy && !stream.work.empty()) return &stream;
  }
  return nullptr;
}

// Takes the head item of `stream`, runs it without the mutex, then marks the stream free again.
bool run_head(State& s, FakeStream* stream, std::unique_lock<std::mutex>& lock) {
  Work work = stream->work.front();
  stream->work.pop_front();
  stream->busy = true;
  lock.unlock();
  const bool counted = run(work);
  lock.lock();
  stream->busy = false;
  if (counted) ++s.items_run;
  s.changed.notify_all();
  return counted;
}

void cuda_thread() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    FakeStream* stream = runnable(s);
    if (stream == nullptr) {
      s.changed.wait(lock);
      continue;
    }
    run_head(s, stream, lock);
  }
}

void add_work(CUstream handle, const Work& work) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.streams[handle].work.push_back(work);
  s.changed.notify_all();
}

std::atomic<bool> g_initialized{false};  // a cuInit succeeded

CUresult CUDAAPI fake_init(unsigned int) {
  const auto result = static_cast<CUresult>(env_int("FAKE_CUDA_INIT_ERROR", CUDA_SUCCESS));
  if (result == CUDA_SUCCESS) g_initialized = true;
  return result;
}

// The devices: CUDA_ERROR_NOT_INITIALIZED before a successful cuInit, CUDA_ERROR_INVALID_DEVICE for an
// ordinal out of range, else CUDA_SUCCESS.
CUresult check_device(int ordinal) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return ordinal >= 0 && ordinal < env_int("FAKE_CUDA_DEVICE_COUNT", 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI fake_device_get_count(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = env_int("FAKE_CUDA_DEVICE_COUNT", 1);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_device_get(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult checked = check_device(ordinal);
  if (checked == CUDA_SUCCESS) *device = ordinal;
  return checked;
}

CUresult CUDAAPI fake_device_get_name(char* name, int length, CUdevice device) {
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult checked = check_device(device);
  if (checked != CUDA_SUCCESS) return checked;
  const auto injected = static_cast<CUresult>(env_int("FAKE_CUDA_DEVICE_ERROR", CUDA_SUCCESS));
  if (injected != CUDA_SUCCESS) return injected;
  std::snprintf(name, static_cast<size_t>(length), "Fake CUDA Device %d", device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_device_get_attribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult checked = check_device(device);
  if (checked != CUDA_SUCCESS) return checked;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI fake_device_total_mem(size_t* bytes, CUdevice device) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult checked = check_device(device);
  if (checked == CUDA_SUCCESS) *bytes = size_t{80} << 30;
  return checked;
}

CUresult CUDAAPI fake_get_error_name(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return CUDA_SUCCESS;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return CUDA_SUCCESS;
    default: *name = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI fake_user_object_create(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned int initial,
                                         unsigned int flags) {
  if (out == nullptr || destroy == nullptr || initial == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = reinterpret_cast<CUuserObject>(new FakeUserObject{ptr, destroy, static_cast<int>(initial)});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_user_object_release(CUuserObject object, unsigned int count) {
  if (object == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  release(reinterpret_cast<FakeUserObject*>(object), static_cast<int>(count));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_graph_retain_user_object(CUgraph graph, CUuserObject object, unsigned int count,
                                               unsigned int flags) {
  auto* fake = reinterpret_cast<FakeGraph*>(graph);
  auto* user_object = reinterpret_cast<FakeUserObject*>(object);
  if (fake == nullptr || fake == &g_failing_graph || user_object == nullptr || count == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(state().mutex);
  if (flags != CU_GRAPH_USER_OBJECT_MOVE) user_object->references += static_cast<int>(count);
  for (unsigned int i = 0; i < count; ++i) fake->objects.push_back(user_object);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_launch_host_func(CUstream stream, CUhostFn fn, void* data) {
  if (stream == kFailingStream || fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  add_work(stream, Work{Work::kHostFunction, Call{fn, data}, 0, nullptr});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_graph_add_host_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies,
                                          size_t count, const CUDA_HOST_NODE_PARAMS* params) {
  auto* fake = reinterpret_cast<FakeGraph*>(graph);
  if (out == nullptr || fake == nullptr || params == nullptr || params->fn == nullptr ||
      (count != 0 && dependencies == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(state().mutex);
  for (size_t i = 0; i < count; ++i) {
    auto* dependency = reinterpret_cast<FakeNode*>(dependencies[i]);
    if (std::find(fake->nodes.begin(), fake->nodes.end(), dependency) == fake->nodes.end()) {
      return CUDA_ERROR_INVALID_VALUE;  // not a node of this graph
    }
  }
  auto* node = new FakeNode{fake, Call{params->fn, params->userData}};
  fake->nodes.push_back(node);
  *out = reinterpret_cast<CUgraphNode>(node);
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph) {
  if (stream == kFailingStream) return CUDA_ERROR_INVALID_HANDLE;
  const bool capturing = stream == kCapturingStream && g_capture_graph != nullptr;
  if (status != nullptr) *status = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id != nullptr) *id = capturing ? 1 : 0;
  if (graph != nullptr) *graph = capturing ? reinterpret_cast<CUgraph>(g_capture_graph) : nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_capture_info_v3(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                                      size_t* count) {
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return capture_info(stream, status, id, graph);
}

CUresult CUDAAPI fake_capture_info_v2(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                      CUgraph* graph, const CUgraphNode** deps, size_t* count) {
  return fake_capture_info_v3(stream, status, id, graph, deps, nullptr, count);
}

// As cuGetProcAddress: the newest ABI of `symbol` no newer than both `version` and the driver's version.
void* lookup(const char* symbol, int version) {
  if (hidden(symbol)) return nullptr;
  struct Entry {
    const char* name;
    int abi_version;
    void* function;
  } const table[] = {
      {"cuInit", 2000, reinterpret_cast<void*>(fake_init)},
      {"cuGetErrorName", 6000, reinterpret_cast<void*>(fake_get_error_name)},
      {"cuUserObjectCreate", 11030, reinterpret_cast<void*>(fake_user_object_create)},
      {"cuUserObjectRelease", 11030, reinterpret_cast<void*>(fake_user_object_release)},
      {"cuGraphRetainUserObject", 11030, reinterpret_cast<void*>(fake_graph_retain_user_object)},
      {"cuLaunchHostFunc", 10000, reinterpret_cast<void*>(fake_launch_host_func)},
      {"cuGraphAddHostNode", 10000, reinterpret_cast<void*>(fake_graph_add_host_node)},
      {"cuStreamGetCaptureInfo", 11030, reinterpret_cast<void*>(fake_capture_info_v2)},
      {"cuStreamGetCaptureInfo", 12030, reinterpret_cast<void*>(fake_capture_info_v3)},
      {"cuDeviceGetCount", 2000, reinterpret_cast<void*>(fake_device_get_count)},
      {"cuDeviceGet", 2000, reinterpret_cast<void*>(fake_device_get)},
      {"cuDeviceGetName", 2000, reinterpret_cast<void*>(fake_device_get_name)},
      {"cuDeviceGetAttribute", 2000, reinterpret_cast<void*>(fake_device_get_attribute)},
      {"cuDeviceTotalMem", 3020, reinterpret_cast<void*>(fake_device_total_mem)},
  };
  const int driver_version = env_int("FAKE_CUDA_VERSION", 13000);
  const Entry* best = nullptr;
  for (const Entry& entry : table) {
    if (std::strcmp(entry.name, symbol) == 0 && entry.abi_version <= version &&
        entry.abi_version <= driver_version && (best == nullptr || entry.abi_version > best->abi_version)) {
      best = &entry;
    }
  }
  return best != nullptr ? best->function : nullptr;
}

}  // namespace

extern "C" {

// --- the driver entry points graph/ finds with dlsym ------------------------------------------------

__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = env_int("FAKE_CUDA_VERSION", 13000);
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                                     int version, cuuint64_t,
                                                                     CUdriverProcAddressQueryResult* found) {
  if (env_int("FAKE_CUDA_NO_PROC_ADDRESS_V2", 0) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  *pfn = lookup(symbol, version);
  if (found != nullptr) *found = *pfn != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                                                  cuuint64_t) {
  *pfn = lookup(symbol, version);
  return *pfn != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// --- test controls: graphs ------------------------------------------------------------------------------

// A new empty graph.
__attribute__((visibility("default"))) CUgraph fake_cuda_graph_create() {
  return reinterpret_cast<CUgraph>(new FakeGraph);
}

// A graph on which cuGraphRetainUserObject fails with CUDA_ERROR_INVALID_VALUE (after the user object was
// created, the case graph/ must withdraw from).
__attribute__((visibility("default"))) CUgraph fake_cuda_failing_graph() {
  return reinterpret_cast<CUgraph>(&g_failing_graph);
}

// Destroys a graph: drops each user-object reference it owns, as cuGraphDestroy does.
__attribute__((visibility("default"))) void fake_cuda_graph_destroy(CUgraph graph) {
  auto* fake = reinterpret_cast<FakeGraph*>(graph);
  if (fake == g_capture_graph) g_capture_graph = nullptr;
  std::vector<FakeUserObject*> objects;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    objects.swap(fake->objects);
    for (FakeNode* node : fake->nodes) delete node;
  }
  for (FakeUserObject* object : objects) release(object, 1);
  delete fake;
}

// Host nodes in `graph` so far.
__attribute__((visibility("default"))) int fake_cuda_graph_host_node_count(CUgraph graph) {
  std::lock_guard<std::mutex> lock(state().mutex);
  return static_cast<int>(reinterpret_cast<FakeGraph*>(graph)->nodes.size());
}

// An executable graph made from `graph` (cuGraphInstantiate): one more reference to each of its user
// objects, a copy of its host nodes.
__attribute__((visibility("default"))) void* fake_cuda_graph_instantiate(CUgraph graph) {
  auto* fake = reinterpret_cast<FakeGraph*>(graph);
  auto* exec = new FakeExec;
  std::lock_guard<std::mutex> lock(state().mutex);
  for (FakeUserObject* object : fake->objects) {
    ++object->references;
    exec->objects.push_back(object);
  }
  for (FakeNode* node : fake->nodes) exec->nodes.push_back(node->call);
  return exec;
}

// Launches `exec` on `stream` (cuGraphLaunch): its host nodes fire in order when the stream gets there.
__attribute__((visibility("default"))) void fake_cuda_graph_launch(void* exec, CUstream stream) {
  auto* fake = static_cast<FakeExec*>(exec);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  FakeStream& target = s.streams[stream];
  for (const Call& call : fake->nodes) target.work.push_back(Work{Work::kHostFunction, call, 0, nullptr});
  ++fake->launches_in_flight;
  target.work.push_back(Work{Work::kLaunchDone, Call{nullptr, nullptr}, 0, fake});
  s.changed.notify_all();
}

// Destroys `exec` (cuGraphExecDestroy): its user-object references go now, or, with launches still queued,
// when the last of them completes.
__attribute__((visibility("default"))) void fake_cuda_graph_exec_destroy(void* exec) {
  auto* fake = static_cast<FakeExec*>(exec);
  bool release_now = false;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    fake->destroyed = true;
    release_now = fake->launches_in_flight == 0;
  }
  if (release_now) release_exec(fake);
}

// 1: user-object destructors whose count reaches zero wait for fake_cuda_run_deferred(); 0: they run
// inside the release, on the caller's thread.
__attribute__((visibility("default"))) void fake_cuda_defer_destructors(int defer) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().defer_destructors = defer != 0;
}

// Runs deferred destructors on another thread (joined); returns how many ran.
__attribute__((visibility("default"))) int fake_cuda_run_deferred() {
  std::vector<Call> calls;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    calls.swap(state().deferred);
  }
  std::thread([&calls] {
    for (const Call& call : calls) call.fn(call.data);
  }).join();
  return static_cast<int>(calls.size());
}

// --- test controls: streams -----------------------------------------------------------------------------

// Runs every runnable work item (host functions, host-node firings, ...) of every stream that is not held,
// in each stream's order, on another thread (joined), as the streams reaching them; returns how many host
// functions and node firings ran.
__attribute__((visibility("default"))) int fake_cuda_run_host_functions() {
  int count = 0;
  std::thread([&count] {
    State& s = state();
    std::unique_lock<std::mutex> lock(s.mutex);
    while (FakeStream* stream = runnable(s)) count += run_head(s, stream, lock) ? 1 : 0;
  }).join();
  return count;
}

// Starts `count` more persistent CUDA threads (see the header comment); they are never stopped. With one,
// host functions run as CUDA runs them: one at a time, and while one has not returned (an ordered call's
// host function waiting for its drain) no other work of any stream runs.
__attribute__((visibility("default"))) void fake_cuda_start_threads(int count) {
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().threads += count;
  }
  for (int i = 0; i < count; ++i) std::thread(cuda_thread).detach();
}

// 1: the stream runs nothing until released with 0 (like a long kernel at its head).
__attribute__((visibility("default"))) void fake_cuda_stream_hold(CUstream stream, int hold) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.streams[stream].held = hold != 0;
  s.changed.notify_all();
}

// Queues a "kernel" on `stream` that takes `microseconds` on the CUDA thread that runs it.
__attribute__((visibility("default"))) void fake_cuda_stream_sleep(CUstream stream, unsigned microseconds) {
  add_work(stream, Work{Work::kSleep, Call{nullptr, nullptr}, microseconds, nullptr});
}

// Waits until `stream` has nothing queued or running (cuStreamSynchronize); needs CUDA threads (or another
// thread calling fake_cuda_run_host_functions). Returns 0, or 1 if `timeout_ms` passed first.
__attribute__((visibility("default"))) int fake_cuda_stream_synchronize(CUstream stream, int timeout_ms) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  const bool done = s.changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    FakeStream& target = s.streams[stream];
    return target.work.empty() && !target.busy;
  });
  return done ? 0 : 1;
}

// Host functions and node firings run so far (by CUDA threads and fake_cuda_run_host_functions).
__attribute__((visibility("default"))) unsigned long long fake_cuda_items_run() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().items_run;
}

// cuLaunchHostFunc(stream, fn, data), for a test that hands the fake a host function itself (an
// integration's (host function, user data) pair): fn(data) runs when the stream gets there. Returns the
// CUresult.
__attribute__((visibility("default"))) int fake_cuda_launch_host_func(CUstream stream, void* fn, void* data) {
  return static_cast<int>(fake_launch_host_func(stream, reinterpret_cast<CUhostFn>(fn), data));
}

// A stream handle that reports an active capture into `graph` (null: capturing nothing).
__attribute__((visibility("default"))) CUstream fake_cuda_capturing_stream(CUgraph graph) {
  g_capture_graph = reinterpret_cast<FakeGraph*>(graph);
  return kCapturingStream;
}

// A stream handle on which every call fails with CUDA_ERROR_INVALID_HANDLE.
__attribute__((visibility("default"))) CUstream fake_cuda_failing_stream() { return kFailingStream; }

}  // extern "C"
