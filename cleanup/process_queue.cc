// cleanup/process_queue.cc — the process-wide queue of this copy of cleanup/ (created once, never
// destroyed) and its configuration from the environment.

#include "cleanup/process_queue.h"

#include <pthread.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "cleanup/fatal.h"
#include "cleanup/reclaim_queue.h"

namespace reclaim {

namespace {

ReclaimQueue* create_global_queue() noexcept {
  QueueOptions options;
  const ReservedCapacitySetting setting = reserved_capacity_from_environment();
  options.reserved_capacity = setting.capacity;
  if (setting.invalid_text != nullptr) {
    // The Python module refuses a bad value with an ImportError before it gets here; a C++ program that
    // links cleanup/ alone gets this note and the default.
    std::fprintf(stderr, "cuda-reclaim: ignoring %s=%s (expected an integer from 1 to %zu); using %zu\n",
                 kReservedCapacityVariable, setting.invalid_text, kMaxReservedCapacity, setting.capacity);
  }
  // Never deleted: pushes from CUDA's thread during exit() must find it alive.
  auto* queue = new (std::nothrow) ReclaimQueue(options);
  if (queue == nullptr) die("cannot allocate the process reclaim queue");
  pthread_atfork(nullptr, nullptr, [] { process_queue().reset_after_fork_in_child(); });
  return queue;
}

}  // namespace

bool parse_reserved_capacity(const char* text, std::size_t* capacity) noexcept {
  if (text == nullptr || capacity == nullptr || *text == '\0') return false;
  std::size_t value = 0;
  for (const char* digit = text; *digit != '\0'; ++digit) {
    if (*digit < '0' || *digit > '9') return false;
    value = value * 10 + static_cast<std::size_t>(*digit - '0');
    if (value > kMaxReservedCapacity) return false;  // checked per digit: no overflow on long inputs
  }
  if (value == 0) return false;
  *capacity = value;
  return true;
}

ReservedCapacitySetting reserved_capacity_from_environment() noexcept {
  ReservedCapacitySetting setting{QueueOptions().reserved_capacity, nullptr};
  const char* text = std::getenv(kReservedCapacityVariable);
  if (text != nullptr && !parse_reserved_capacity(text, &setting.capacity)) setting.invalid_text = text;
  return setting;
}

ReclaimQueue& process_queue() noexcept {
  static ReclaimQueue* const queue = create_global_queue();
  return *queue;
}

}  // namespace reclaim
