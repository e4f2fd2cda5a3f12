// tests/graph/driver_test.cc — loading the driver at run time: each way it can be missing or unusable
// gives its status and a message naming what is missing; a working (fake) driver resolves everything.

#include "graph/driver.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/graph/fake_driver.h"

namespace reclaim {
namespace graph {
namespace {

using reclaim_test::fake_libcuda_path;

// Each test sets the fake's environment knobs it needs and clears them afterwards.
class DriverTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("FAKE_CUDA_VERSION");
    unsetenv("FAKE_CUDA_HIDE");
    unsetenv("FAKE_CUDA_INIT_ERROR");
  }
};

TEST_F(DriverTest, MissingLibraryIsReportedWithItsName) {
  const Driver driver = load_driver("/nonexistent/libcuda.so.1");
  EXPECT_EQ(driver.status, DriverStatus::kLibraryMissing);
  EXPECT_NE(std::string(driver.message).find("/nonexistent/libcuda.so.1"), std::string::npos)
      << driver.message;
  EXPECT_EQ(driver.api.user_object_create, nullptr);
}

TEST_F(DriverTest, LibraryThatIsNotADriverIsTooOld) {
  const Driver driver = load_driver("libm.so.6");
  EXPECT_EQ(driver.status, DriverStatus::kDriverTooOld);
  EXPECT_NE(std::string(driver.message).find("does not report its version"), std::string::npos)
      << driver.message;
}

TEST_F(DriverTest, DriverOlderThanUserObjectsIsTooOldAndSaysItsVersion) {
  setenv("FAKE_CUDA_VERSION", "11020", 1);
  const Driver driver = load_driver(fake_libcuda_path().c_str());
  EXPECT_EQ(driver.status, DriverStatus::kDriverTooOld);
  EXPECT_EQ(driver.version, 11020);
  EXPECT_NE(std::string(driver.message).find("version 11.2"), std::string::npos) << driver.message;
  EXPECT_NE(std::string(driver.message).find("11.3 or newer"), std::string::npos) << driver.message;
  EXPECT_EQ(driver.api.launch_host_func, nullptr);
}

TEST_F(DriverTest, MissingEntryPointIsNamed) {
  setenv("FAKE_CUDA_HIDE", "cuGraphRetainUserObject", 1);
  const Driver driver = load_driver(fake_libcuda_path().c_str());
  EXPECT_EQ(driver.status, DriverStatus::kDriverTooOld);
  EXPECT_NE(std::string(driver.message).find("cuGraphRetainUserObject"), std::string::npos)
      << driver.message;
  EXPECT_EQ(driver.api.user_object_create, nullptr) << "a failed load leaves no usable entry point";
}

TEST_F(DriverTest, InitFailureKeepsTheErrorAndNamesIt) {
  setenv("FAKE_CUDA_INIT_ERROR", "100", 1);  // CUDA_ERROR_NO_DEVICE
  const Driver driver = load_driver(fake_libcuda_path().c_str());
  EXPECT_EQ(driver.status, DriverStatus::kInitFailed);
  EXPECT_EQ(driver.error, CUDA_ERROR_NO_DEVICE);
  EXPECT_NE(std::string(driver.message).find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << driver.message;
}

TEST_F(DriverTest, WorkingDriverResolvesEveryEntryPointAtTheNewestCaptureInfoAbi) {
  const Driver driver = load_driver(fake_libcuda_path().c_str());
  ASSERT_EQ(driver.status, DriverStatus::kOk) << driver.message;
  EXPECT_EQ(driver.version, 13000);
  EXPECT_STREQ(driver.message, "");
  EXPECT_NE(driver.api.get_error_name, nullptr);
  EXPECT_NE(driver.api.user_object_create, nullptr);
  EXPECT_NE(driver.api.user_object_release, nullptr);
  EXPECT_NE(driver.api.graph_retain_user_object, nullptr);
  EXPECT_NE(driver.api.launch_host_func, nullptr);
  EXPECT_NE(driver.api.stream_get_capture_info_v3, nullptr);
  EXPECT_EQ(driver.api.stream_get_capture_info_v2, nullptr);
}

TEST_F(DriverTest, DriverBeforeCaptureEdgeDataUsesTheOlderCaptureInfoAbi) {
  setenv("FAKE_CUDA_VERSION", "12020", 1);
  const Driver driver = load_driver(fake_libcuda_path().c_str());
  ASSERT_EQ(driver.status, DriverStatus::kOk) << driver.message;
  EXPECT_EQ(driver.api.stream_get_capture_info_v3, nullptr);
  EXPECT_NE(driver.api.stream_get_capture_info_v2, nullptr);
}

TEST_F(DriverTest, ErrorNameFallsBackWhenTheDriverCannotNameIt) {
  const Driver missing = load_driver("/nonexistent/libcuda.so.1");
  EXPECT_STREQ(error_name(missing, CUDA_ERROR_INVALID_VALUE), "an unknown CUDA error");
  const Driver working = load_driver(fake_libcuda_path().c_str());
  EXPECT_STREQ(error_name(working, CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
}

TEST_F(DriverTest, ProcessDriverFollowsTheEnvironmentAndIsLoadedOnce) {
  setenv("CUDA_RECLAIM_LIBCUDA", "/nonexistent/libcuda-for-test.so.1", 1);
  const Driver& first = driver();
  EXPECT_EQ(first.status, DriverStatus::kLibraryMissing);
  EXPECT_NE(std::string(first.message).find("libcuda-for-test"), std::string::npos) << first.message;
  setenv("CUDA_RECLAIM_LIBCUDA", fake_libcuda_path().c_str(), 1);
  EXPECT_EQ(&driver(), &first) << "a failed load is remembered, not retried";
  EXPECT_EQ(driver().status, DriverStatus::kLibraryMissing);
}

}  // namespace
}  // namespace graph
}  // namespace reclaim
