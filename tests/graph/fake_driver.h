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
};

}  // namespace reclaim_test
