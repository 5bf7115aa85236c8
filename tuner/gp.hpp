// tuner/gp.hpp: a small Gaussian-process regressor for the Bayesian-optimization strategy: Matern 5/2
// kernel with one length scale per feature (ARD), fixed unit signal variance (targets are
// standardized), and length scales and noise chosen by maximizing the log marginal likelihood over
// grids, one at a time. Written out here (a Cholesky of a few hundred rows)
// rather than pulling Eigen into tuner/: Eigen belongs to reference/ (STYLE.md, one folder per library).
#pragma once

#include <vector>

namespace flashtune::tuner {

/// Standard normal density and distribution function.
double normal_pdf(double z);
double normal_cdf(double z);

/// Expected improvement of a minimization at a point with predicted mean `mu` and standard deviation
/// `sigma`, over the best value `best` with margin `xi` >= 0: E[max(best - xi - Y, 0)], Y ~ N(mu, sigma^2).
double expected_improvement(double mu, double sigma, double best, double xi);

class GaussianProcess {
 public:
  /// Length scales tried for each feature (features are in [0, 1]).
  static const std::vector<double>& length_scale_grid();

  /// Fits to points x (each of the same dimension) and targets y. With `fit_length_scales`, chooses
  /// the length scales and the noise variance by maximum likelihood starting from `length_scales`
  /// (or the grid's middle value when empty) and `noise` (or the smallest when <= 0); otherwise uses
  /// them as given. Throws core::Error on empty or ragged input.
  void fit(std::vector<std::vector<double>> x, std::vector<double> y, bool fit_length_scales,
           std::vector<double> length_scales = {}, double noise = 0);

  /// Posterior mean and standard deviation (of the latent function, noise excluded) at `x`, in the
  /// units of the y given to fit.
  void predict(const std::vector<double>& x, double& mean, double& stdev) const;

  /// The kernel (correlation, in [0, 1]) between two points under the fitted length scales.
  double correlation(const std::vector<double>& a, const std::vector<double>& b) const { return kernel(a, b, m_scales); }

  const std::vector<double>& length_scales() const { return m_scales; }
  double noise() const { return m_noise; }  ///< noise variance on the standardized targets
  double log_marginal_likelihood() const { return m_lml; }

 private:
  double kernel(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& scales) const;
  /// Factorizes K + noise I for `scales`; returns the log marginal likelihood (-inf when not positive
  /// definite) and leaves the factor in m_chol, the weights in m_alpha.
  double factorize(const std::vector<double>& scales);

  std::vector<std::vector<double>> m_x;
  std::vector<double> m_y;             // standardized
  double m_y_mean = 0, m_y_scale = 1;  // to undo the standardization
  std::vector<double> m_scales;
  double m_noise = 0;
  std::vector<double> m_chol;          // lower triangle, row-major n x n
  std::vector<double> m_alpha;         // (K + noise I)^-1 y
  double m_lml = 0;
};

}  // namespace flashtune::tuner
