// cleanup/fatal.h — the one way cleanup/ gives up: for a queue that cannot be created at all.
#pragma once

namespace reclaim {

// Prints "cuda-reclaim: fatal: <what> (errno N)" on stderr, then aborts. Any thread; never returns.
[[noreturn]] void die(const char* what) noexcept;

}  // namespace reclaim
