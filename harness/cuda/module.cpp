// harness/cuda/module.cpp: Module, launch, function_resources.
#include "harness/cuda/module.hpp"

#include <utility>

#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

Module::Module(const std::vector<char>& cubin) : m_generation(context_generation()) {
  if (cubin.empty()) throw core::Error("Module: empty CUBIN image");
  FT_CHECK_CU(driver().cuModuleLoadData(&m_module, cubin.data()));
}
Module::~Module() { unload(); }
Module::Module(Module&& other) noexcept
    : m_module(std::exchange(other.m_module, nullptr)), m_generation(other.m_generation) {}
Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    unload();
    m_module = std::exchange(other.m_module, nullptr);
    m_generation = other.m_generation;
  }
  return *this;
}
void Module::unload() noexcept {
  if (m_module && m_generation == context_generation()) {
    try {
      driver().cuModuleUnload(m_module);
    } catch (...) {
    }
  }
  m_module = nullptr;
}

CUfunction Module::function(const std::string& lowered_name) const {
  CUfunction f = nullptr;
  if (const CUresult rc = driver().cuModuleGetFunction(&f, m_module, lowered_name.c_str()); rc != CUDA_SUCCESS)
    throw CudaError(rc, "cuModuleGetFunction(\"" + lowered_name + "\")", __FILE__, __LINE__);
  return f;
}

void raise_dynamic_smem_limit(CUfunction f, unsigned dynamic_smem_bytes) {
  constexpr unsigned kDefaultDynamicSmemLimit = 48 * 1024;  // [bytes] without opt-in
  if (dynamic_smem_bytes > kDefaultDynamicSmemLimit)
    FT_CHECK_CU(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            static_cast<int>(dynamic_smem_bytes)));
}

void launch(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3],
            unsigned dynamic_smem_bytes, CUstream stream, void** args, bool limit_raised) {
  if (!limit_raised) raise_dynamic_smem_limit(f, dynamic_smem_bytes);
  FT_CHECK_CU(driver().cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                      dynamic_smem_bytes, stream, args, nullptr));
}

void launch_programmatic(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3],
                         unsigned dynamic_smem_bytes, CUstream stream, void** args) {
  raise_dynamic_smem_limit(f, dynamic_smem_bytes);
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
  config.blockDimX = block[0], config.blockDimY = block[1], config.blockDimZ = block[2];
  config.sharedMemBytes = dynamic_smem_bytes;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  FT_CHECK_CU(driver().cuLaunchKernelEx(&config, f, args, nullptr));
}

core::KernelResources function_resources(CUfunction f) {
  const Driver& d = driver();
  auto get = [&](CUfunction_attribute attr, const char* what) {
    int value = 0;
    if (const CUresult rc = d.cuFuncGetAttribute(&value, attr, f); rc != CUDA_SUCCESS)
      throw CudaError(rc, std::string("cuFuncGetAttribute(") + what + ")", __FILE__, __LINE__);
    return value;
  };
  core::KernelResources r;
  r.registers = get(CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS");
  r.stack_frame_bytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES");
  r.shared_static_bytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES");
  r.constant_bytes = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "CONST_SIZE_BYTES");
  return r;
}

}  // namespace flashtune::cuda
