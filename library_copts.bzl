"""The compile options of cuda-reclaim's own code: //cleanup:queue, //abi, //handback, //graph and the extension (and the benchmark
code that stands for them). setup.py compiles the pip-built extension with the same list
(LIBRARY_COMPILE_FLAGS); tests/packaging:build_drift_test checks that the two agree.

-Wall -Wextra: our code compiles without a warning from GCC (Bazel, setup.py) or clang (zig, the wheels);
.bazelrc's --config=strict and setup.py's CUDA_RECLAIM_WERROR=1 make them errors, in CI only, so that a
user's other compiler that warns still builds.

-funroll-loops: a drain copies the pointers it takes out of moodycamel's blocks in ConcurrentQueue's own
loop (try_dequeue_bulk, flattened into the drain's take_bulk), about 7 instructions per pointer at -O2, where
GCC does not unroll a loop whose trip count is known only at run time; unrolled, about 4.5 (the copy's part in
docs/benchmarks-instructions.json, counted with `//bench:count_instructions` over 10^6 objects that die).
bindings' release loops opt out (bindings/release_loop.h says why). The benchmark's limit
and anchors keep the toolchain's defaults.
"""

LIBRARY_COPTS = [
    "-Wall",
    "-Wextra",
    "-funroll-loops",
]
