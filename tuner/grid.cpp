// tuner/grid.cpp: candidate coordinates and the portable random draws.
#include "tuner/grid.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace flashtune::tuner {

Grid::Grid(const std::vector<core::Config>& candidates) : m_configs(candidates) {
  if (!m_configs.empty())
    for (const auto& [name, value] : m_configs.front().values) m_names.push_back(name);  // std::map: sorted
  std::vector<std::set<std::int64_t>> seen(m_names.size());
  for (const auto& c : m_configs) {
    if (c.values.size() != m_names.size())
      throw core::Error("tuner grid: config " + c.key() + " does not name the same tunables as " +
                        m_configs.front().key());
    std::size_t d = 0;
    for (const auto& [name, value] : c.values) {
      if (name != m_names[d])
        throw core::Error("tuner grid: config " + c.key() + " does not name the same tunables as " +
                          m_configs.front().key());
      seen[d++].insert(value);
    }
  }
  for (const auto& s : seen) m_levels.emplace_back(s.begin(), s.end());
  m_coords.reserve(m_configs.size() * m_names.size());
  for (std::size_t i = 0; i < m_configs.size(); ++i) {
    std::vector<int> point;
    std::size_t d = 0;
    for (const auto& [name, value] : m_configs[i].values) {
      const auto& lv = m_levels[d++];
      point.push_back(static_cast<int>(std::lower_bound(lv.begin(), lv.end(), value) - lv.begin()));
    }
    m_coords.insert(m_coords.end(), point.begin(), point.end());
    if (!m_by_key.emplace(m_configs[i].key(), i).second)
      throw core::Error("tuner grid: config " + m_configs[i].key() + " is listed twice");
    m_by_point.emplace(std::move(point), i);
  }
}

std::vector<int> Grid::coords(std::size_t i) const {
  return std::vector<int>(m_coords.begin() + static_cast<std::ptrdiff_t>(i * dims()),
                          m_coords.begin() + static_cast<std::ptrdiff_t>((i + 1) * dims()));
}

double Grid::feature(std::size_t i, std::size_t d) const {
  const std::size_t n = m_levels[d].size();
  return n > 1 ? double(coord(i, d)) / double(n - 1) : 0.0;
}

int Grid::distance(const std::vector<int>& a, const std::vector<int>& b) {
  int s = 0;
  for (std::size_t d = 0; d < a.size() && d < b.size(); ++d) s += std::abs(a[d] - b[d]);
  return s;
}

int Grid::distance(std::size_t i, const std::vector<int>& point) const {
  int s = 0;
  for (std::size_t d = 0; d < dims(); ++d) s += std::abs(coord(i, d) - point[d]);
  return s;
}

std::optional<std::size_t> Grid::find(const core::Config& c) const {
  const auto it = m_by_key.find(c.key());
  if (it == m_by_key.end()) return std::nullopt;
  return it->second;
}

std::optional<std::size_t> Grid::find(const std::vector<int>& point) const {
  const auto it = m_by_point.find(point);
  if (it == m_by_point.end()) return std::nullopt;
  return it->second;
}

std::size_t Grid::PointHash::operator()(const std::vector<int>& v) const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (int x : v) h = (h ^ static_cast<std::uint32_t>(x)) * 0x100000001b3ULL;
  return static_cast<std::size_t>(h);
}

std::size_t Rng::index(std::size_t n) {
  const std::uint64_t m = n, limit = std::mt19937_64::max() - std::mt19937_64::max() % m;
  std::uint64_t x;
  do x = m_engine(); while (x >= limit);
  return static_cast<std::size_t>(x % m);
}

double Rng::uniform() { return double(m_engine() >> 11) * 0x1.0p-53; }

}  // namespace flashtune::tuner
