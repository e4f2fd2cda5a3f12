// graph/driver.cc — dlopen libcuda.so.1 and resolve entry points with cuGetProcAddress.

#include "graph/driver.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace reclaim {
namespace graph {
namespace {

// cuGetProcAddress_v2 (CUDA 12.0+: reports why a symbol was not found) or the 11.3 original.
struct ProcAddress {
  PFN_cuGetProcAddress_v12000 v2 = nullptr;
  PFN_cuGetProcAddress_v11030 v1 = nullptr;

  // The entry point `name` with the ABI of CUDA version `version`, or null. Stream functions resolve to
  // their legacy-default-stream variants, as in code built without per-thread default streams.
  void* find(const char* name, int version) const {
    void* function = nullptr;
    if (v2 != nullptr) {
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      if (v2(name, &function, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) != CUDA_SUCCESS ||
          found != CU_GET_PROC_ADDRESS_SUCCESS) {
        return nullptr;
      }
    } else if (v1(name, &function, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM) != CUDA_SUCCESS) {
      return nullptr;
    }
    return function;
  }

  template <typename Pfn>
  bool find(const char* name, int version, Pfn* out) const {
    *out = reinterpret_cast<Pfn>(find(name, version));
    return *out != nullptr;
  }
};

__attribute__((format(printf, 3, 4))) Driver& fail(Driver& driver, DriverStatus status, const char* format,
                                                   ...) {
  driver.status = status;
  va_list args;
  va_start(args, format);
  std::vsnprintf(driver.message, sizeof driver.message, format, args);
  va_end(args);
  driver.api = DriverApi();
  return driver;
}

// Every entry point of DeviceApi the driver has; the others stay null (device queries then say which).
void resolve_device_api(const ProcAddress& proc, DeviceApi* devices) {
  proc.find("cuInit", 2000, &devices->init);
  proc.find("cuGetErrorName", 6000, &devices->get_error_name);
  proc.find("cuDeviceGetCount", 2000, &devices->device_get_count);
  proc.find("cuDeviceGet", 2000, &devices->device_get);
  proc.find("cuDeviceGetName", 2000, &devices->device_get_name);
  proc.find("cuDeviceGetAttribute", 2000, &devices->device_get_attribute);
  proc.find("cuDeviceTotalMem", 3020, &devices->device_total_mem);  // the _v2 ABI (size_t bytes)
}

__attribute__((format(printf, 2, 3))) DeviceQuery failed_query(DeviceQuery* query, const char* format, ...) {
  query->ok = false;
  va_list args;
  va_start(args, format);
  std::vsnprintf(query->why, sizeof query->why, format, args);
  va_end(args);
  return *query;
}

// Checks that every DeviceApi entry point is there, then calls cuInit(0) (a no-op once it succeeded).
bool initialized_for_query(const Driver& driver, DeviceQuery* query) {
  if (driver.status == DriverStatus::kLibraryMissing) {
    failed_query(query, "no CUDA driver library could be loaded");
    return false;
  }
  const DeviceApi& api = driver.devices;
  if (api.init == nullptr && api.device_get_count == nullptr) {  // the load stopped before cuGetProcAddress
    failed_query(query, "the CUDA driver cannot be asked: it is too old or not a CUDA driver");
    return false;
  }
  const char* missing = api.init == nullptr                   ? "cuInit"
                        : api.get_error_name == nullptr       ? "cuGetErrorName"
                        : api.device_get_count == nullptr     ? "cuDeviceGetCount"
                        : api.device_get == nullptr           ? "cuDeviceGet"
                        : api.device_get_name == nullptr      ? "cuDeviceGetName"
                        : api.device_get_attribute == nullptr ? "cuDeviceGetAttribute"
                        : api.device_total_mem == nullptr     ? "cuDeviceTotalMem_v2"
                                                              : nullptr;
  if (missing != nullptr) {
    failed_query(query, "the CUDA driver does not provide %s", missing);
    return false;
  }
  const CUresult result = api.init(0);
  if (result != CUDA_SUCCESS) {
    failed_query(query, "cuInit failed: %s", error_name(driver, result));
    return false;
  }
  return true;
}

// Appends to the message of a driver that could not be loaded, or is not a usable driver, where the library
// came from: CUDA_RECLAIM_LIBCUDA (`from_setting`), or the variable that names another one.
void name_the_setting(Driver* driver, bool from_setting) {
  if (driver->status != DriverStatus::kLibraryMissing && driver->status != DriverStatus::kDriverTooOld) return;
  const std::size_t used = std::strlen(driver->message);
  const char* note = from_setting ? "; CUDA_RECLAIM_LIBCUDA names this library"
                     : driver->status == DriverStatus::kLibraryMissing
                         ? "; set CUDA_RECLAIM_LIBCUDA to the driver library's path if it is installed elsewhere"
                         : "; CUDA_RECLAIM_LIBCUDA may name another driver library";
  std::snprintf(driver->message + used, sizeof driver->message - used, "%s", note);
}

}  // namespace

Driver load_driver(const char* library) noexcept {
  Driver driver;
  // RTLD_LOCAL: libcuda's symbols stay out of the global namespace; we only reach them through pointers.
  // Never dlclose: destructors CUDA runs during exit() live in this library and call into ours.
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return fail(driver, DriverStatus::kLibraryMissing,
                "the CUDA driver library %s could not be loaded (%s): graph and stream keep-alive need "
                "an NVIDIA driver",
                library, why != nullptr ? why : "unknown reason");
  }
  auto get_version = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(dlsym(handle, "cuDriverGetVersion"));
  if (get_version == nullptr || get_version(&driver.version) != CUDA_SUCCESS) {
    return fail(driver, DriverStatus::kDriverTooOld, "the CUDA driver in %s does not report its version",
                library);
  }
  if (driver.version < kMinimumDriverVersion) {
    return fail(driver, DriverStatus::kDriverTooOld,
                "the CUDA driver is version %d.%d; graph and stream keep-alive need %d.%d or newer "
                "(CUDA user objects)",
                driver.version / 1000, driver.version % 1000 / 10, kMinimumDriverVersion / 1000,
                kMinimumDriverVersion % 1000 / 10);
  }
  ProcAddress proc;
  proc.v2 = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  proc.v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(handle, "cuGetProcAddress"));
  if (proc.v2 == nullptr && proc.v1 == nullptr) {
    return fail(driver, DriverStatus::kDriverTooOld, "the CUDA driver in %s has no cuGetProcAddress",
                library);
  }

  resolve_device_api(proc, &driver.devices);

  DriverApi& api = driver.api;
  PFN_cuInit_v2000 init = driver.devices.init;
  const char* missing = nullptr;
  if (init == nullptr) missing = "cuInit";
  if (!proc.find("cuGetErrorName", 6000, &api.get_error_name)) missing = "cuGetErrorName";
  if (!proc.find("cuUserObjectCreate", 11030, &api.user_object_create)) missing = "cuUserObjectCreate";
  if (!proc.find("cuUserObjectRelease", 11030, &api.user_object_release)) missing = "cuUserObjectRelease";
  if (!proc.find("cuGraphRetainUserObject", 11030, &api.graph_retain_user_object)) {
    missing = "cuGraphRetainUserObject";
  }
  if (!proc.find("cuLaunchHostFunc", 10000, &api.launch_host_func)) missing = "cuLaunchHostFunc";
  if (!proc.find("cuGraphAddHostNode", 10000, &api.graph_add_host_node)) missing = "cuGraphAddHostNode";
  // cuGetProcAddress answers with the newest ABI no newer than the version asked for AND the driver's:
  // asking a 12.2 driver for 12.3's signature would return 11.3's. So ask for the one the driver has.
  const bool has_edge_data = driver.version >= 12030;
  if (has_edge_data ? !proc.find("cuStreamGetCaptureInfo", 12030, &api.stream_get_capture_info_v3)
                    : !proc.find("cuStreamGetCaptureInfo", 11030, &api.stream_get_capture_info_v2)) {
    missing = "cuStreamGetCaptureInfo";
  }
  if (missing != nullptr) {
    return fail(driver, DriverStatus::kDriverTooOld,
                "the CUDA driver (version %d.%d) does not provide %s, which graph and stream keep-alive "
                "need",
                driver.version / 1000, driver.version % 1000 / 10, missing);
  }
  const CUresult initialized = init(0);
  if (initialized != CUDA_SUCCESS) {
    const char* name = error_name(driver, initialized);
    fail(driver, DriverStatus::kInitFailed, "cuInit failed with %s", name);
    driver.error = initialized;
    return driver;
  }
  driver.status = DriverStatus::kOk;
  return driver;
}

const Driver& driver() noexcept {
  // Loaded once and never destroyed: a static Driver object would be destroyed at exit while CUDA may
  // still call back into code that reads it.
  static const Driver* const loaded = [] {
    const char* library = std::getenv("CUDA_RECLAIM_LIBCUDA");
    const bool from_setting = library != nullptr && *library != '\0';
    auto* loaded_driver = new Driver(load_driver(from_setting ? library : "libcuda.so.1"));
    name_the_setting(loaded_driver, from_setting);
    return loaded_driver;
  }();
  return *loaded;
}

const char* error_name(const Driver& driver, CUresult error) noexcept {
  // DeviceApi's copy outlives a failed load (DriverApi is cleared then).
  const PFN_cuGetErrorName_v6000 namers[] = {driver.api.get_error_name, driver.devices.get_error_name};
  for (PFN_cuGetErrorName_v6000 get_error_name : namers) {
    const char* name = nullptr;
    if (get_error_name != nullptr && get_error_name(error, &name) == CUDA_SUCCESS && name != nullptr) {
      return name;
    }
  }
  return "an unknown CUDA error";
}

DeviceQuery device_count(const Driver& driver, int* count) noexcept {
  DeviceQuery query;
  *count = 0;
  if (!initialized_for_query(driver, &query)) return query;
  int found = 0;
  const CUresult result = driver.devices.device_get_count(&found);
  if (result != CUDA_SUCCESS) {
    return failed_query(&query, "cuDeviceGetCount failed: %s", error_name(driver, result));
  }
  *count = found;
  query.ok = true;
  return query;
}

DeviceQuery device_properties(const Driver& driver, int ordinal, DeviceProperties* properties) noexcept {
  DeviceQuery query;
  *properties = DeviceProperties();
  if (!initialized_for_query(driver, &query)) return query;
  const DeviceApi& api = driver.devices;
  CUdevice device = 0;
  const char* call = "cuDeviceGet";
  CUresult result = api.device_get(&device, ordinal);
  if (result == CUDA_SUCCESS) {
    call = "cuDeviceGetName";
    result = api.device_get_name(properties->name, static_cast<int>(sizeof properties->name - 1), device);
  }
  if (result == CUDA_SUCCESS) {
    call = "cuDeviceGetAttribute";
    result = api.device_get_attribute(&properties->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                      device);
  }
  if (result == CUDA_SUCCESS) {
    result = api.device_get_attribute(&properties->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      device);
  }
  if (result == CUDA_SUCCESS) {
    call = "cuDeviceTotalMem_v2";
    result = api.device_total_mem(&properties->total_memory, device);
  }
  if (result != CUDA_SUCCESS) {
    *properties = DeviceProperties();
    return failed_query(&query, "%s failed for device %d: %s", call, ordinal, error_name(driver, result));
  }
  query.ok = true;
  return query;
}

}  // namespace graph
}  // namespace reclaim
