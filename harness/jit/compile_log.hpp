// harness/jit/compile_log.hpp: reading an NVRTC compile log: the kernel resources of the ptxas verbose report
// (--ptxas-options=-v) and the line to show a person. Plain text in, values out; no NVRTC needed.
#pragma once

#include <string>
#include <string_view>

#include "harness/core/types.hpp"

namespace flashtune::jit {

/// The first line of an NVRTC log that says "error" (the one to show a person), else its first 200 characters.
std::string first_error_line(const std::string& log);

/// Resources of kernel `lowered_name` from a ptxas verbose report ("Used N registers, ... N bytes smem",
/// "N bytes stack frame, N bytes spill stores, N bytes spill loads"), which may cover several kernels.
/// constant_bytes sums the user constant banks (cmem[1..]). Empty `lowered_name`: the report's only kernel.
/// Fields stay -1 when the report does not mention the kernel.
core::KernelResources parse_ptxas_report(std::string_view log, const std::string& lowered_name);

}  // namespace flashtune::jit
