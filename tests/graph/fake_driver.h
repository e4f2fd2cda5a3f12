// tests/graph/fake_driver.h — opens the fake libcuda (fake_libcuda.cc) from the test's runfiles and
// reaches its fake_cuda_* controls.

#pragma once

#include <dlfcn.h>

#include <memory>
#include <string>

#include <cuda.h>
#include <gtest/gtest.h>

#include "tools/cpp/runfiles/runfiles.h"

namespace reclaim_test {

inline std::string fake_libcuda_path() {
  using bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  const std::unique_ptr<Runfiles> runfiles(Runfiles::CreateForTest(&error));
  if (runfiles == nullptr) {
    ADD_FAILURE() << "no runfiles: " << error;
    return "";
  }
  return runfiles->Rlocation("cuda_reclaim/tests/graph/fake_libcuda.so");
}

// The fake's controls, resolved from the same loaded copy that load_driver() opens.
struct FakeCuda {
  void* handle = dlopen(fake_libcuda_path().c_str(), RTLD_NOW | RTLD_LOCAL);

  template <typename Fn>
  Fn* get(const char* name) const {
    void* symbol = handle != nullptr ? dlsym(handle, name) : nullptr;
    EXPECT_NE(symbol, nullptr) << name;
    return reinterpret_cast<Fn*>(symbol);
  }

  CUgraph graph_create() const { return get<CUgraph()>("fake_cuda_graph_create")(); }
  CUgraph failing_graph() const { return get<CUgraph()>("fake_cuda_failing_graph")(); }
  void graph_destroy(CUgraph graph) const { get<void(CUgraph)>("fake_cuda_graph_destroy")(graph); }
  void defer_destructors(bool defer) const { get<void(int)>("fake_cuda_defer_destructors")(defer ? 1 : 0); }
  int run_deferred() const { return get<int()>("fake_cuda_run_deferred")(); }
  int run_host_functions() const { return get<int()>("fake_cuda_run_host_functions")(); }
  CUstream capturing_stream(CUgraph graph) const {
    return get<CUstream(CUgraph)>("fake_cuda_capturing_stream")(graph);
  }
  CUstream failing_stream() const { return get<CUstream()>("fake_cuda_failing_stream")(); }
  void* instantiate(CUgraph graph) const { return get<void*(CUgraph)>("fake_cuda_graph_instantiate")(graph); }
  void launch(void* exec, CUstream stream) const {
    get<void(void*, CUstream)>("fake_cuda_graph_launch")(exec, stream);
  }
  void exec_destroy(void* exec) const { get<void(void*)>("fake_cuda_graph_exec_destroy")(exec); }
  int host_node_count(CUgraph graph) const { return get<int(CUgraph)>("fake_cuda_graph_host_node_count")(graph); }
  void start_threads(int count) const { get<void(int)>("fake_cuda_start_threads")(count); }
  void hold(CUstream stream, bool hold) const {
    get<void(CUstream, int)>("fake_cuda_stream_hold")(stream, hold ? 1 : 0);
  }
  int synchronize(CUstream stream, int timeout_ms) const {
    return get<int(CUstream, int)>("fake_cuda_stream_synchronize")(stream, timeout_ms);
  }
};

}  // namespace reclaim_test
