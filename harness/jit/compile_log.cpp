// harness/jit/compile_log.cpp: reading an NVRTC log: the resources ptxas reports per kernel, and the line to show.
#include "harness/jit/compile_log.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <vector>

namespace flashtune::jit {

// ptxas report parsing. Lines look like (ptxas of CUDA 12/13):
//   ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
//   ptxas info    : Function properties for _Z1kPf
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 9 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]
namespace {

// The integer that ends (spaces aside) just before position `at` of `line`, or nullopt.
std::optional<int> number_ending_at(std::string_view line, std::size_t at) {
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  return std::stoi(std::string(line.substr(begin, end - begin)));
}

// The integer just before `unit` in `line` ("512 bytes smem" -> 512), or nullopt.
std::optional<int> number_before(std::string_view line, std::string_view unit) {
  const std::size_t at = line.find(unit);
  if (at == std::string_view::npos) return std::nullopt;
  return number_ending_at(line, at);
}

std::string quoted_or_rest(std::string_view line, std::string_view after) {
  std::size_t at = line.find(after);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + after.size());
  if (!rest.empty() && rest.front() == '\'') {
    const std::size_t end = rest.find('\'', 1);
    return std::string(rest.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
  }
  const std::size_t end = rest.find_first_of(" \t\r");
  return std::string(rest.substr(0, end));
}

}  // namespace

core::KernelResources parse_ptxas_report(std::string_view log, const std::string& lowered_name) {
  std::map<std::string, core::KernelResources> kernels;  // entry functions
  std::map<std::string, core::KernelResources> props;    // stack/spill lines by function
  std::vector<std::string> entry_order;
  std::string entry, props_target;

  std::size_t pos = 0;
  while (pos <= log.size()) {
    std::size_t nl = log.find('\n', pos);
    if (nl == std::string_view::npos) nl = log.size();
    const std::string_view line = log.substr(pos, nl - pos);
    pos = nl + 1;

    if (line.find("Compiling entry function") != std::string_view::npos) {
      entry = quoted_or_rest(line, "Compiling entry function ");
      if (!kernels.count(entry)) entry_order.push_back(entry);
      kernels[entry];
    } else if (line.find("Function properties for ") != std::string_view::npos) {
      props_target = quoted_or_rest(line, "Function properties for ");
    } else if (line.find("bytes stack frame") != std::string_view::npos && !props_target.empty()) {
      core::KernelResources& r = props[props_target];
      r.stack_frame_bytes = number_before(line, "bytes stack frame").value_or(-1);
      r.spill_store_bytes = number_before(line, "bytes spill stores").value_or(-1);
      r.spill_load_bytes = number_before(line, "bytes spill loads").value_or(-1);
    } else if (line.find("Used ") != std::string_view::npos && line.find(" registers") != std::string_view::npos &&
               !entry.empty()) {
      core::KernelResources& r = kernels[entry];
      r.registers = number_before(line, "registers").value_or(-1);
      r.shared_static_bytes = number_before(line, "bytes smem").value_or(0);
      int constant = 0;
      for (std::size_t c = line.find("bytes cmem["); c != std::string_view::npos; c = line.find("bytes cmem[", c + 1)) {
        const std::size_t bank_at = c + 11;
        const bool user_bank = bank_at < line.size() && line[bank_at] != '0';
        if (user_bank) constant += number_ending_at(line, c).value_or(0);
      }
      r.constant_bytes = constant;
    }
  }

  std::string name = lowered_name;
  if (name.empty() && entry_order.size() == 1) name = entry_order.front();
  core::KernelResources result;
  if (auto it = kernels.find(name); it != kernels.end()) result = it->second;
  else return result;
  if (auto it = props.find(name); it != props.end()) {
    result.stack_frame_bytes = it->second.stack_frame_bytes;
    result.spill_store_bytes = it->second.spill_store_bytes;
    result.spill_load_bytes = it->second.spill_load_bytes;
  }
  return result;
}

std::string first_error_line(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line))
    if (line.find("error") != std::string::npos) return line;
  return log.substr(0, std::min<std::size_t>(log.size(), 200));
}

}  // namespace flashtune::jit
