// graph/driver.h — the CUDA driver, loaded at run time.
//
// libcuda.so.1 is opened with dlopen on first use and its entry points are resolved with cuGetProcAddress
// at the ABI version each caller here was written for, so this library links no CUDA library and a
// process without a driver imports fine: only the GPU features fail, with a status and a message that
// name what is missing. The library is never closed (a user-object destructor may run during exit()).
//
// Loading calls cuInit(0), and so does each device query below (a no-op once it succeeded): initializing
// CUDA is a side effect on the process (no context is created). The device queries only serve reports
// (`python -m cuda_reclaim info`) and tests; no keep-alive or host-call path calls them.

#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>

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

// The entry points the device queries call (all present since CUDA 3.2). Resolved as soon as the driver
// has cuGetProcAddress and kept when the load fails later (an entry point of DriverApi missing, cuInit
// failing), so a report can still say what the driver sees; unset entries are null.
struct DeviceApi {
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuDeviceGetCount_v2000 device_get_count = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetName_v2000 device_get_name = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
};

struct Driver {
  DriverStatus status = DriverStatus::kLibraryMissing;
  CUresult error = CUDA_SUCCESS;  // for kInitFailed
  int version = 0;                // cuDriverGetVersion, e.g. 13000; 0 when unknown
  char message[512] = {};         // why the driver is unusable, for the user; empty when kOk
  DriverApi api;
  DeviceApi devices;  // see DeviceApi: may be usable when `api` is not
};

// Opens `library` (a soname or a path), checks the driver version, resolves every entry point and calls
// cuInit(0). Fills a Driver whatever happens; never throws. The library stays open for good.
// Cost: dlopen and a few dozen symbol look-ups; call once (see driver()).
// Any thread; never touches Python; may block (dlopen, cuInit).
Driver load_driver(const char* library) noexcept;

// The process-wide driver, loaded on first call from CUDA_RECLAIM_LIBCUDA (environment: a driver installed
// elsewhere, or a missing or fake one for tests) or else "libcuda.so.1". When the library cannot be loaded or
// is not a usable driver, the message names CUDA_RECLAIM_LIBCUDA: the library it named, or the variable to
// set. A failed load is remembered: later calls return the same result without retrying. Never destroyed.
// Any thread; never touches Python; the first call may block (see load_driver), later calls do not.
const Driver& driver() noexcept;

// "CUDA_ERROR_INVALID_VALUE" (or "an unknown CUDA error" when the driver cannot name it). Never null.
// Any thread; never touches Python; never blocks.
const char* error_name(const Driver& driver, CUresult error) noexcept;

// The outcome of a device query: `ok`, or `why` not, for the user ("cuInit failed: CUDA_ERROR_NO_DEVICE",
// "no CUDA driver library could be loaded", "the CUDA driver does not provide cuDeviceGetName").
struct DeviceQuery {
  bool ok = false;
  char why[192] = {};
};

// What the driver says of one device.
struct DeviceProperties {
  char name[256] = {};           // cuDeviceGetName
  int major = 0;                 // compute capability, major.minor (cuDeviceGetAttribute)
  int minor = 0;
  std::size_t total_memory = 0;  // bytes (cuDeviceTotalMem_v2)
};

// Sets *count to the number of devices the driver sees (cuDeviceGetCount), after cuInit(0): initializes
// CUDA in the process (see the header comment); only reports and tests may call it. Fails, with a reason,
// when the driver is missing, lacks an entry point of DeviceApi, or a call fails (e.g. cuInit with
// CUDA_ERROR_NO_DEVICE on a machine without a GPU); *count is then 0. Never throws, never allocates.
// Any thread; never touches Python; may block (cuInit).
DeviceQuery device_count(const Driver& driver, int* count) noexcept;

// Fills *properties for device `ordinal` (0 <= ordinal < device_count), after cuInit(0) as device_count
// does; creates no context. Fails, with a reason naming the call and the device, as device_count does.
// Any thread; never touches Python; may block (cuInit); never allocates.
DeviceQuery device_properties(const Driver& driver, int ordinal, DeviceProperties* properties) noexcept;

}  // namespace graph
}  // namespace reclaim
