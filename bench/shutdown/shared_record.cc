// bench/shutdown/shared_record.cc — see shared_record.h.

#include "bench/shutdown/shared_record.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace reclaim_shutdown {

SharedRecord* map_shared_record(const char* path) noexcept {
  const int fd = open(path, O_RDWR);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, sizeof(SharedRecord)) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return nullptr;
  }
  void* memory = mmap(nullptr, sizeof(SharedRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  errno = saved;
  return memory == MAP_FAILED ? nullptr : static_cast<SharedRecord*>(memory);
}

void unmap_shared_record(SharedRecord* record) noexcept { munmap(record, sizeof(SharedRecord)); }

Slot* claim_slot(SharedRecord* record) noexcept {
  const std::uint32_t index = record->next_slot.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxSlots) return nullptr;
  Slot* slot = &record->slots[index];
  slot->pid.store(getpid(), std::memory_order_relaxed);
  return slot;
}

std::uint32_t slots_used(const SharedRecord& record) noexcept {
  return std::min<std::uint32_t>(record.next_slot.load(std::memory_order_relaxed), kMaxSlots);
}

}  // namespace reclaim_shutdown
