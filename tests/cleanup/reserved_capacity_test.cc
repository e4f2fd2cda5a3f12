// tests/cleanup/reserved_capacity_test.cc — CUDA_RECLAIM_RESERVED_CAPACITY is read in one place,
// reserved_capacity_from_environment(): the value, the default, and the text of a bad value.

#include <stdlib.h>

#include <string>

#include "cleanup/reclaim_queue.h"
#include "gtest/gtest.h"

namespace {

using reclaim::kMaxReservedCapacity;
using reclaim::kReservedCapacityVariable;
using reclaim::QueueOptions;
using reclaim::ReservedCapacitySetting;
using reclaim::reserved_capacity_from_environment;

TEST(ReservedCapacity, UnsetMeansTheDefault) {
  ASSERT_EQ(::unsetenv(kReservedCapacityVariable), 0);
  const ReservedCapacitySetting setting = reserved_capacity_from_environment();
  EXPECT_EQ(setting.capacity, QueueOptions().reserved_capacity);
  EXPECT_EQ(setting.invalid_text, nullptr);
}

TEST(ReservedCapacity, AValidValueIsTaken) {
  ASSERT_EQ(::setenv(kReservedCapacityVariable, "1024", 1), 0);
  const ReservedCapacitySetting setting = reserved_capacity_from_environment();
  EXPECT_EQ(setting.capacity, 1024u);
  EXPECT_EQ(setting.invalid_text, nullptr);
  ASSERT_EQ(::unsetenv(kReservedCapacityVariable), 0);
}

TEST(ReservedCapacity, ABadValueKeepsTheDefaultAndSaysWhatItWas) {
  const std::string too_large = std::to_string(kMaxReservedCapacity + 1);
  for (const char* text : {"", "0", "x", "12k", "-5", too_large.c_str()}) {
    ASSERT_EQ(::setenv(kReservedCapacityVariable, text, 1), 0);
    const ReservedCapacitySetting setting = reserved_capacity_from_environment();
    EXPECT_EQ(setting.capacity, QueueOptions().reserved_capacity) << text;
    ASSERT_NE(setting.invalid_text, nullptr) << text;
    EXPECT_STREQ(setting.invalid_text, text);
  }
  ASSERT_EQ(::unsetenv(kReservedCapacityVariable), 0);
}

}  // namespace
