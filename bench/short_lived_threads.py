"""Cost of many short-lived producer threads: push+drain time and resident memory, before and after.

A thread pool per batch, asyncio.to_thread and per-request threads all hand references over from threads
that live briefly. This benchmark measures one hand-over plus its drain on the main thread (median of
rounds), then lets THREADS short-lived threads (ALIVE at a time) hand one reference over each, drains, and
measures again, with the process's resident set size at each point. Prints a Markdown table.

    python bench/short_lived_threads.py [--threads 100000] [--alive 100]
"""

import argparse
import gc
import os
import statistics
import sys
import threading
import time

import cuda_reclaim


def rss_mib():
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def push_drain_ns(rounds=30, per_round=2000):
    medians = []
    payload = object()
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(per_round):
            cuda_reclaim.defer_release(payload)
            cuda_reclaim.drain()
        medians.append((time.perf_counter_ns() - start) / per_round)
    return statistics.median(medians)


def churn(threads, alive):
    payload = object()
    done = 0
    while done < threads:
        wave = [threading.Thread(target=cuda_reclaim.defer_release, args=(payload,)) for _ in range(min(alive, threads - done))]
        for thread in wave:
            thread.start()
        for thread in wave:
            thread.join()
        done += len(wave)
        cuda_reclaim.drain()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=100000)
    parser.add_argument("--alive", type=int, default=100)
    args = parser.parse_args()
    cuda_reclaim.set_auto_drain("off")  # only this thread drains: the timing is of push + drain alone
    push_drain_ns()  # warm up: this thread's producer, the allocator
    gc.collect()
    before_ns, before_rss = push_drain_ns(), rss_mib()
    started = time.monotonic()
    churn(args.threads, args.alive)
    churn_seconds = time.monotonic() - started
    gc.collect()
    after_ns, after_rss = push_drain_ns(), rss_mib()
    print(f"Python {sys.version.split()[0]}; cuda-reclaim {cuda_reclaim.__version__}; {args.threads} threads, "
          f"{args.alive} alive at a time ({churn_seconds:.1f} s); {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}")
    print("| | push + drain (median) | resident set |")
    print("|---|---|---|")
    print(f"| before | {before_ns / 1000:.2f} µs | {before_rss:.1f} MiB |")
    print(f"| after {args.threads} short-lived threads | {after_ns / 1000:.2f} µs | {after_rss:.1f} MiB |")
    print(f"| ratio / growth | {after_ns / before_ns:.2f}× | {after_rss - before_rss:+.1f} MiB |")


if __name__ == "__main__":
    main()
