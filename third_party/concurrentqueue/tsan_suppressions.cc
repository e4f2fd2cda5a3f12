// ThreadSanitizer suppressions for moodycamel::ConcurrentQueue.
//
// The queue synchronizes element slots with std::atomic_thread_fence, which
// TSAN does not model (GCC even warns: -Wtsan "atomic_thread_fence is not
// supported with -fsanitize=thread"), so multi-producer/consumer use reports
// false data races on the elements being moved in/out of the queue. GCC 12
// lacks __has_feature, so the header's own MOODYCAMEL_NO_TSAN is inactive too.
//
// TSAN calls this hook at startup; it must be defined in the executable, hence
// this library is linkstatic + alwayslink. Only races with a moodycamel:: frame
// in one of the two stacks are suppressed; user-code races are still reported.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:moodycamel::\n";
}
#endif
