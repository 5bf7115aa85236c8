// tuner/space.cpp: search-space size and odometer enumeration.
#include "tuner/space.hpp"

#include <set>

namespace flashtune::tuner {

std::int64_t SearchSpace::size() const {
  std::int64_t n = 1;
  for (const auto& [name, values] : dims) {
    if (__builtin_mul_overflow(n, static_cast<std::int64_t>(values.size()), &n))
      throw core::Error("search space size overflows int64 at dimension '" + name + "'");
  }
  return n;
}

std::vector<core::Config> enumerate(const SearchSpace& space,
                                    const std::function<bool(const core::Config&)>& keep) {
  std::set<std::string> seen;
  for (const auto& [name, values] : space.dims)
    if (!seen.insert(name).second) throw core::Error("search space names dimension '" + name + "' twice");

  std::vector<core::Config> out;
  if (space.size() == 0) return out;

  const std::size_t n = space.dims.size();
  std::vector<std::size_t> index(n, 0);  // odometer digits, last one fastest
  core::Config c;
  for (const auto& [name, values] : space.dims) c.values[name] = values.front();
  while (true) {
    if (!keep || keep(c)) out.push_back(c);
    std::size_t d = n;
    while (d > 0) {
      --d;
      const auto& [name, values] = space.dims[d];
      if (++index[d] < values.size()) {
        c.values[name] = values[index[d]];
        break;
      }
      index[d] = 0;
      c.values[name] = values.front();
      if (d == 0) return out;
    }
    if (n == 0) return out;
  }
}

}  // namespace flashtune::tuner
