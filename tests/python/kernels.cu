// tests/python/kernels.cu — the kernels of the GPU tests (test_gpu_graph.py and its child
// children/exit_with_running_kernel.py), compiled at run time with cuda.core's Program (NVRTC).

// Busy-waits `cycles` GPU clock cycles: a kernel that is still running when the test acts.
extern "C" __global__ void spin(unsigned long long cycles) {
  long long start = clock64();
  while (clock64() - start < (long long)cycles) {
  }
}

// Spins like `spin`, then writes `value` to data[threadIdx.x]: a kernel with a buffer argument.
extern "C" __global__ void fill(int* data, int value, unsigned long long cycles) {
  long long start = clock64();
  while (clock64() - start < (long long)cycles) {
  }
  data[threadIdx.x] = value;
}
