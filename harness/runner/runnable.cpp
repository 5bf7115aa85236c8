// harness/runner/runnable.cpp: configs split by can_run, grouped by reason (runnable.hpp).
#include "harness/runner/runnable.hpp"

#include <algorithm>
#include <cctype>

namespace flashtune::runner {

std::string reason_kind(const std::string& reason) {
  std::string out;
  for (std::size_t i = 0; i < reason.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(reason[i]))) {
      out += '#';
      while (i + 1 < reason.size() && std::isdigit(static_cast<unsigned char>(reason[i + 1]))) ++i;
    } else {
      out += reason[i];
    }
  }
  return out;
}

RunnableSplit split_runnable(const kernels::KernelFamily& family, const std::vector<core::Config>& configs,
                             const core::Problem& problem, const core::DeviceLimits& device) {
  RunnableSplit s;
  for (const auto& c : configs) {
    if (auto why = family.can_run(c, problem, device)) s.unrunnable.push_back({c, *why});
    else s.runnable.push_back(c);
  }
  return s;
}

std::map<std::string, std::int64_t> RunnableSplit::by_reason() const {
  std::map<std::string, std::int64_t> out;
  for (const auto& u : unrunnable) ++out[reason_kind(u.reason)];
  return out;
}

std::string RunnableSplit::summary() const {
  std::vector<std::pair<std::string, std::int64_t>> groups;
  for (const auto& g : by_reason()) groups.push_back(g);
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [kind, n] : groups) {
    const auto example = std::find_if(unrunnable.begin(), unrunnable.end(),
                                      [&](const Unrunnable& u) { return reason_kind(u.reason) == kind; });
    out += (out.empty() ? "" : "; ") + std::to_string(n) + " x " + kind + " (e.g. " + example->config.key() + ": " +
           example->reason + ")";
  }
  return out;
}

}  // namespace flashtune::runner
