// tests/graph/fake_libcuda.cc — a stand-in libcuda.so.1 for tests on machines without a GPU.
//
// Loaded through CUDA_RECLAIM_LIBCUDA (Python) or load_driver(path) (GoogleTest), it implements just the
// entry points graph/ resolves, with graphs, user objects and streams as plain host objects, and lets the
// test choose what fails and when destructors run. Its controls are the fake_cuda_* functions below
// (ctypes or dlsym). Load-time behaviour comes from the environment, read at each cuDriverGetVersion /
// cuGetProcAddress call: FAKE_CUDA_VERSION (default 13000), FAKE_CUDA_HIDE (one entry point to hide),
// FAKE_CUDA_INIT_ERROR (a CUresult for cuInit to return), FAKE_CUDA_NO_PROC_ADDRESS_V2=1 (behave as a
// driver without cuGetProcAddress_v2: the v1 one is used).

#include <cuda.h>

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; a driver exports both, under their own names.
#undef cuGetProcAddress

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct FakeUserObject {
  void* ptr;
  CUhostFn destroy;
  int references;
};

struct FakeGraph {
  std::vector<FakeUserObject*> objects;  // one entry per reference the graph owns
};

struct Call {
  CUhostFn fn;
  void* data;
};

std::mutex g_mutex;
bool g_defer_destructors = false;  // release: run destructors now (false) or at fake_cuda_run_deferred()
std::vector<Call> g_deferred;      // destructors and host functions waiting for a "CUDA thread"
std::vector<Call> g_host_functions;
FakeGraph g_failing_graph;  // cuGraphRetainUserObject fails on this one
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

// Takes the calls waiting in `pending` and runs them on another thread (joined), as CUDA's thread would;
// returns how many ran.
int run_on_thread(std::vector<Call>& pending) {
  std::vector<Call> calls;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    calls.swap(pending);
  }
  std::thread([&calls] {
    for (const Call& call : calls) call.fn(call.data);
  }).join();
  return static_cast<int>(calls.size());
}

// Drops `count` references; runs (or defers) the destructor at zero. Called with g_mutex NOT held, so a
// destructor may call back into the fake.
void release(FakeUserObject* object, int count) {
  bool destroy = false;
  bool defer = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    object->references -= count;
    destroy = object->references == 0;
    defer = g_defer_destructors;
    if (destroy && defer) g_deferred.push_back(Call{object->destroy, object->ptr});
  }
  if (destroy) {
    if (!defer) object->destroy(object->ptr);
    delete object;
  }
}

CUresult CUDAAPI fake_init(unsigned int) {
  return static_cast<CUresult>(env_int("FAKE_CUDA_INIT_ERROR", CUDA_SUCCESS));
}

CUresult CUDAAPI fake_get_error_name(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return CUDA_SUCCESS;
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
  std::lock_guard<std::mutex> lock(g_mutex);
  if (flags != CU_GRAPH_USER_OBJECT_MOVE) user_object->references += static_cast<int>(count);
  for (unsigned int i = 0; i < count; ++i) fake->objects.push_back(user_object);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI fake_launch_host_func(CUstream stream, CUhostFn fn, void* data) {
  if (stream == kFailingStream || fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_host_functions.push_back(Call{fn, data});
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
      {"cuStreamGetCaptureInfo", 11030, reinterpret_cast<void*>(fake_capture_info_v2)},
      {"cuStreamGetCaptureInfo", 12030, reinterpret_cast<void*>(fake_capture_info_v3)},
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

// --- test controls ----------------------------------------------------------------------------------

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
  for (FakeUserObject* object : fake->objects) release(object, 1);
  delete fake;
}

// 1: user-object destructors whose count reaches zero wait for fake_cuda_run_deferred(); 0: they run
// inside the release, on the caller's thread.
__attribute__((visibility("default"))) void fake_cuda_defer_destructors(int defer) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_defer_destructors = defer != 0;
}

// Runs deferred destructors on another thread (joined); returns how many ran.
__attribute__((visibility("default"))) int fake_cuda_run_deferred() { return run_on_thread(g_deferred); }

// Runs launched host functions on another thread (joined), as the stream reaching them; returns how many.
__attribute__((visibility("default"))) int fake_cuda_run_host_functions() {
  return run_on_thread(g_host_functions);
}

// A stream handle that reports an active capture into `graph` (null: capturing nothing).
__attribute__((visibility("default"))) CUstream fake_cuda_capturing_stream(CUgraph graph) {
  g_capture_graph = reinterpret_cast<FakeGraph*>(graph);
  return kCapturingStream;
}

// A stream handle on which every call fails with CUDA_ERROR_INVALID_HANDLE.
__attribute__((visibility("default"))) CUstream fake_cuda_failing_stream() { return kFailingStream; }

}  // extern "C"
