// graph/driver.h — the CUDA driver, loaded at run time.
//
// libcuda.so.1 is opened with dlopen on first use and its entry points are resolved with cuGetProcAddress
// at the ABI version each caller here was written for, so this library links no CUDA library and a
// process without a driver imports fine: only the GPU features fail, with a status and a message that
// name what is missing. The library is never closed (a user-object destructor may run during exit()).

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace reclaim {
namespace graph {

// What loading the driver found. Everything but kOk leaves the entry points unusable.
enum class DriverStatus : int {
  kOk = 0,
  kLibraryMissing = 1,  // dlopen failed: no libcuda.so.1 (no NVIDIA driver installed).
  kDriverTooOld = 2,    // no cuGetProcAddress, driver version below kMinimumDriverVersion, or an entry
                        // point this library needs is absent.
  kInitFailed = 3,      // cuInit failed (e.g. CUDA_ERROR_NO_DEVICE); `error` holds the CUresult.
};

// User objects (cuUserObjectCreate, cuGraphRetainUserObject) appeared in CUDA 11.3.
constexpr int kMinimumDriverVersion = 11030;

// The entry points graph/ calls, at fixed ABI versions (the PFN_*_vNNNNN typedefs of cudaTypedefs.h).
// A plain struct so tests can fill it with fakes.
struct DriverApi {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuUserObjectCreate_v11030 user_object_create = nullptr;
  PFN_cuUserObjectRelease_v11030 user_object_release = nullptr;
  PFN_cuGraphRetainUserObject_v11030 graph_retain_user_object = nullptr;
  PFN_cuLaunchHostFunc_v10000 launch_host_func = nullptr;
  PFN_cuGraphAddHostNode_v10000 graph_add_host_node = nullptr;
  // One of the two is set: the 12.3+ signature (with edge data) where the driver has it, else 11.3's.
  PFN_cuStreamGetCaptureInfo_v12030 stream_get_capture_info_v3 = nullptr;
  PFN_cuStreamGetCaptureInfo_v11030 stream_get_capture_info_v2 = nullptr;
};

struct Driver {
  DriverStatus status = DriverStatus::kLibraryMissing;
  CUresult error = CUDA_SUCCESS;  // for kInitFailed
  int version = 0;                // cuDriverGetVersion, e.g. 13000; 0 when unknown
  char message[384] = {};         // why the driver is unusable, for the user; empty when kOk
  DriverApi api;
};

// Opens `library` (a soname or a path), checks the driver version, resolves every entry point and calls
// cuInit(0). Fills a Driver whatever happens; never throws. The library stays open for good.
// Cost: dlopen and a few dozen symbol look-ups; call once (see driver()).
// Any thread; never touches Python; may block (dlopen, cuInit).
Driver load_driver(const char* library) noexcept;

// The process-wide driver, loaded on first call from CUDA_RECLAIM_LIBCUDA (environment; for tests that
// need a missing or fake driver) or else "libcuda.so.1". A failed load is remembered: later calls return
// the same result without retrying. Never destroyed.
// Any thread; never touches Python; the first call may block (see load_driver), later calls do not.
const Driver& driver() noexcept;

// "CUDA_ERROR_INVALID_VALUE" (or "CUresult 1" when the driver cannot name it). Never null.
// Any thread; never touches Python; never blocks.
const char* error_name(const Driver& driver, CUresult error) noexcept;

}  // namespace graph
}  // namespace reclaim
