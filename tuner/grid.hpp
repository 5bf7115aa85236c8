// tuner/grid.hpp: the geometry that learning strategies search in, and their random numbers. A Grid
// places each candidate config (already pruned by the constraints, so it has holes) on integer
// coordinates: per tunable, the index of its value among the sorted distinct values the candidates use.
// Neighbours, distances, crossover and model features are all taken on these coordinates, so a tunable
// whose values are powers of two (block sizes) is searched on a log scale without being told so.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

class Grid {
 public:
  /// Throws core::Error when the configs do not all name the same tunables, or a config is listed twice.
  explicit Grid(const std::vector<core::Config>& candidates);

  std::size_t size() const { return m_configs.size(); }
  std::size_t dims() const { return m_names.size(); }
  const std::vector<std::string>& names() const { return m_names; }          ///< tunables, sorted by name
  const std::vector<std::int64_t>& levels(std::size_t d) const { return m_levels[d]; }  ///< ascending
  const core::Config& config(std::size_t i) const { return m_configs[i]; }

  /// Coordinate of candidate i in dimension d: index of its value in levels(d).
  int coord(std::size_t i, std::size_t d) const { return m_coords[i * dims() + d]; }
  std::vector<int> coords(std::size_t i) const;
  /// coord / (levels - 1), in [0, 1]; 0 for a dimension with one level.
  double feature(std::size_t i, std::size_t d) const;

  /// L1 distance between coordinate vectors (a candidate's or any point of the box).
  static int distance(const std::vector<int>& a, const std::vector<int>& b);
  int distance(std::size_t i, const std::vector<int>& point) const;

  std::optional<std::size_t> find(const core::Config& c) const;     ///< by Config::key()
  std::optional<std::size_t> find(const std::vector<int>& point) const;  ///< the candidate at these coordinates

 private:
  struct PointHash {
    std::size_t operator()(const std::vector<int>& v) const noexcept;
  };
  std::vector<core::Config> m_configs;
  std::vector<std::string> m_names;
  std::vector<std::vector<std::int64_t>> m_levels;
  std::vector<int> m_coords;  // size() x dims(), row-major
  std::unordered_map<std::string, std::size_t> m_by_key;
  std::unordered_map<std::vector<int>, std::size_t, PointHash> m_by_point;
};

// Seeded random numbers that are the same on every platform: mt19937_64 with hand-written uniform
// draws (the standard distributions differ between library implementations).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : m_engine(seed) {}
  std::size_t index(std::size_t n);  ///< uniform in [0, n); n > 0 (rejection sampling, no modulo bias)
  double uniform();                  ///< uniform in [0, 1), 53 random bits
  bool chance(double p) { return uniform() < p; }

 private:
  std::mt19937_64 m_engine;
};

}  // namespace flashtune::tuner
