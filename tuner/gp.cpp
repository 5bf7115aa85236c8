// tuner/gp.cpp: Cholesky-based Gaussian-process regression and expected improvement.
#include "tuner/gp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

namespace {
// Noise variances tried on the standardized targets, chosen with the length scales by likelihood.
// Timings repeat to about 1 % and log times spread 0.3-1 over a space (noise ~1e-3), but neighbours
// also differ by what no smooth model explains (wave quantization, bank conflicts): more noise.
const std::vector<double> kNoiseGrid{1e-3, 1e-2, 5e-2};
constexpr double kSqrt5 = 2.23606797749979;
constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)
constexpr int kLikelihoodPasses = 2;  // sweeps of one-feature-at-a-time length-scale search
}  // namespace

double normal_pdf(double z) { return std::exp(-0.5 * z * z) * 0.3989422804014327; }
double normal_cdf(double z) { return 0.5 * std::erfc(-z * 0.7071067811865476); }

double expected_improvement(double mu, double sigma, double best, double xi) {
  const double gain = best - xi - mu;
  if (sigma <= 1e-12) return gain > 0 ? gain : 0.0;
  const double z = gain / sigma;
  return gain * normal_cdf(z) + sigma * normal_pdf(z);
}

const std::vector<double>& GaussianProcess::length_scale_grid() {
  static const std::vector<double> grid{0.08, 0.15, 0.25, 0.4, 0.6, 1.0, 1.6, 3.0};
  return grid;
}

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b,
                               const std::vector<double>& scales) const {
  double r2 = 0;
  for (std::size_t d = 0; d < a.size(); ++d) {
    const double t = (a[d] - b[d]) / scales[d];
    r2 += t * t;
  }
  const double r = std::sqrt(r2);
  return (1 + kSqrt5 * r + 5.0 / 3.0 * r2) * std::exp(-kSqrt5 * r);
}

double GaussianProcess::factorize(const std::vector<double>& scales) {
  const std::size_t n = m_x.size();
  m_chol.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) m_chol[i * n + j] = kernel(m_x[i], m_x[j], scales) + (i == j ? m_noise : 0);
  double log_det = 0;
  for (std::size_t j = 0; j < n; ++j) {  // in-place Cholesky, lower triangle
    double s = m_chol[j * n + j];
    for (std::size_t k = 0; k < j; ++k) s -= m_chol[j * n + k] * m_chol[j * n + k];
    if (!(s > 0)) return -std::numeric_limits<double>::infinity();
    const double l = std::sqrt(s);
    m_chol[j * n + j] = l;
    log_det += 2 * std::log(l);
    for (std::size_t i = j + 1; i < n; ++i) {
      double t = m_chol[i * n + j];
      for (std::size_t k = 0; k < j; ++k) t -= m_chol[i * n + k] * m_chol[j * n + k];
      m_chol[i * n + j] = t / l;
    }
  }
  std::vector<double> z(m_y);  // solve L z = y, then L^T alpha = z
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < i; ++k) z[i] -= m_chol[i * n + k] * z[k];
    z[i] /= m_chol[i * n + i];
  }
  m_alpha = z;
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t k = i + 1; k < n; ++k) m_alpha[i] -= m_chol[k * n + i] * m_alpha[k];
    m_alpha[i] /= m_chol[i * n + i];
  }
  double fit = 0;
  for (std::size_t i = 0; i < n; ++i) fit += z[i] * z[i];
  return -0.5 * fit - 0.5 * log_det - 0.5 * double(n) * kLog2Pi;
}

void GaussianProcess::fit(std::vector<std::vector<double>> x, std::vector<double> y, bool fit_length_scales,
                          std::vector<double> length_scales, double noise) {
  if (x.empty() || x.size() != y.size()) throw core::Error("GaussianProcess::fit: needs as many targets as points (>= 1)");
  const std::size_t dims = x.front().size();
  for (const auto& p : x)
    if (p.size() != dims) throw core::Error("GaussianProcess::fit: points of different dimensions");
  m_x = std::move(x);
  double mean = 0;
  for (double v : y) mean += v;
  mean /= double(y.size());
  double var = 0;
  for (double v : y) var += (v - mean) * (v - mean);
  var /= double(y.size());
  m_y_mean = mean;
  m_y_scale = var > 1e-24 ? std::sqrt(var) : 1.0;
  m_y.resize(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) m_y[i] = (y[i] - mean) / m_y_scale;

  const auto& grid = length_scale_grid();
  if (length_scales.size() != dims) length_scales.assign(dims, grid[grid.size() / 2]);
  m_scales = length_scales;
  m_noise = noise > 0 ? noise : kNoiseGrid.front();
  if (fit_length_scales && dims > 0) {
    double best = factorize(m_scales);
    for (int pass = 0; pass < kLikelihoodPasses; ++pass) {
      bool changed = false;
      for (std::size_t d = 0; d < dims; ++d) {
        std::vector<double> trial = m_scales;
        for (double s : grid) {
          if (s == m_scales[d]) continue;
          trial[d] = s;
          const double lml = factorize(trial);
          if (lml > best + 1e-9) best = lml, m_scales[d] = s, changed = true;
        }
      }
      const double kept = m_noise;
      for (double v : kNoiseGrid) {
        if (v == kept) continue;
        m_noise = v;
        const double lml = factorize(m_scales);
        if (lml > best + 1e-9) best = lml, changed = true;
        else m_noise = kept;
      }
      if (!changed) break;
    }
  }
  m_lml = factorize(m_scales);
  if (!std::isfinite(m_lml)) throw core::Error("GaussianProcess::fit: kernel matrix is not positive definite");
}

void GaussianProcess::predict(const std::vector<double>& x, double& mean, double& stdev) const {
  const std::size_t n = m_x.size();
  std::vector<double> k(n);
  double mu = 0;
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = kernel(x, m_x[i], m_scales);
    mu += k[i] * m_alpha[i];
  }
  for (std::size_t i = 0; i < n; ++i) {  // v = L^-1 k, in place
    for (std::size_t j = 0; j < i; ++j) k[i] -= m_chol[i * n + j] * k[j];
    k[i] /= m_chol[i * n + i];
  }
  double var = 1.0;
  for (double v : k) var -= v * v;
  mean = mu * m_y_scale + m_y_mean;
  stdev = std::sqrt(std::max(var, 0.0)) * m_y_scale;
}

}  // namespace flashtune::tuner
