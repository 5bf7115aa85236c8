// tests/cli/planted_kernels.hpp: a template folder for `flashtune run --templates` in which weighted_row_sum
// goes wrong on purpose for the GPU tests of the restart paths (cli_gpu_test, multi_gpu_test): the
// specialization with kBlockThreads == crash_threads writes far out of bounds (a sticky CUDA error), the one
// with kBlockThreads == hang_threads spins forever on a volatile read (y holds the NaN poison, never 12345);
// every other specialization computes the right answer. 0 plants nothing.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "harness/jit/template_store.hpp"

namespace ft_test {

inline void write_planted_templates(const std::filesystem::path& dir, int crash_threads, int hang_threads) {
  std::filesystem::create_directories(dir);
  flashtune::jit::write_templates(dir);
  std::ofstream(dir / "weighted_row_sum.cuh")
      << "#include \"ft/types.cuh\"\n"
         "template <typename T, int kBlockThreads, int kRowsPerBlock, int kVec>\n"
         "__global__ void weighted_row_sum_kernel(const T* x, const T* w, float* y, long long rows, long long cols,\n"
         "                                        long long stride_x) {\n"
         "  const long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
         "  if (kBlockThreads == " << crash_threads << ") y[row + (1ll << 40)] = 1.0f;\n"
         "  if (kBlockThreads == " << hang_threads << ") {\n"
         "    volatile float* stuck = y;\n"
         "    while (stuck[0] != 12345.0f) {\n"
         "    }\n"
         "  }\n"
         "  if (row >= rows) return;\n"
         "  float acc = 0.0f;\n"
         "  for (long long j = 0; j < cols; ++j) acc += to_float(x[row * stride_x + j]) * to_float(w[j]);\n"
         "  y[row] = acc;\n"
         "}\n";
}

}  // namespace ft_test
