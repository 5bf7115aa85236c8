// harness/experiment/builtin_catalog.cpp: the catalog of every built-in kernel family (ft_kernels).
// Kept apart so ft_experiment builds, and its tests run with fake families, without ft_kernels.
#include "harness/experiment/experiment.hpp"

namespace flashtune::experiment {

FamilyCatalog builtin_catalog() {
  FamilyCatalog c;
  for (const auto& f : kernels::all_families()) c.families.push_back(f.get());
  return c;
}

}  // namespace flashtune::experiment
