// harness/experiment/experiment.cpp: YAML -> Experiment, with every check done before any work and
// every error located in the file (yaml-cpp marks are 0-based; messages print them 1-based). The top level
// (name, description, arch, then the sections in order) and the family catalog; the sections are read by
// settings.cpp and study.cpp (sections.hpp) over yaml_reader.hpp.
#include "harness/experiment/experiment.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "harness/experiment/sections.hpp"

namespace flashtune::experiment {

using namespace detail;  // the loader's private parts: yaml_reader.hpp, sections.hpp

const kernels::KernelFamily* FamilyCatalog::find(const std::string& name) const {
  for (const auto* f : families)
    if (f && f->name() == name) return f;
  return nullptr;
}

std::vector<std::string> FamilyCatalog::names() const {
  std::vector<std::string> out;
  for (const auto* f : families)
    if (f) out.push_back(f->name());
  return out;
}

tuner::ConstraintSet constraint_set(const Study& study) {
  if (!study.kernel) throw core::Error("study of family '" + study.family + "' has no kernel family");
  return tuner::ConstraintSet(study.constraints, study.kernel->constraint_variables());
}

std::vector<core::Config> candidates(const Study& study, const core::Problem& problem) {
  const tuner::ConstraintSet cs = constraint_set(study);
  return tuner::enumerate(study.space, [&](const core::Config& c) { return cs.allows(c, problem); });
}

Experiment parse_experiment(const std::string& yaml_text, const std::string& display_path, const FamilyCatalog& catalog) {
  const Ctx ctx(display_path);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    ctx.fail(e.mark, "", "malformed YAML: " + e.msg);
  }

  const std::vector<std::string> top_keys{"name", "description", "arch", "limits", "measure", "validate", "studies"};
  if (!root.IsMap())
    ctx.fail(root.IsNull() ? YAML::Mark() : root.Mark(), "",
             "expected a map with keys (" + join(top_keys) + "), got " + describe(root));
  MapReader r(ctx, root, "", top_keys);

  Experiment ex;
  ex.path = display_path;
  ex.text_hash = core::hash_hex(yaml_text);

  const Entry& ne = r.require("name");
  ex.name = to_string_value(ctx, ne.value, ne.path);
  const bool name_ok = !ex.name.empty() && std::all_of(ex.name.begin(), ex.name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (!name_ok) ctx.fail(ne.value, ne.path, "'" + ex.name + "' must match [a-z0-9_-]+");

  if (const Entry* e = r.get("description"))
    if (!e->value.IsNull()) ex.description = to_string_value(ctx, e->value, e->path);

  ex.arch = "sm_90a";
  if (const Entry* e = r.get("arch")) {
    ex.arch = to_string_value(ctx, e->value, e->path);
    try {
      core::DeviceLimits::for_arch(ex.arch);
    } catch (const core::UserError& err) {
      ctx.fail(e->value, e->path, err.what());
    }
  }

  if (const Entry* e = r.get("limits")) ex.limits = read_limits(ctx, e->value, e->path);
  if (const Entry* e = r.get("measure")) ex.measure = read_measure(ctx, e->value, e->path, core::MeasureSettings{});
  if (const Entry* e = r.get("validate")) ex.validate = read_validate(ctx, e->value, e->path);

  const Entry& se = r.require("studies");
  if (!se.value.IsSequence() || se.value.size() == 0)
    ctx.fail(se.value, se.path, "expected a non-empty list of studies, got " + describe(se.value));
  std::int64_t problems = 0;
  for (std::size_t i = 0; i < se.value.size(); ++i) {
    ex.studies.push_back(read_study(ctx, se.value[i], "studies[" + std::to_string(i) + "]", catalog, ex.measure,
                                    ex.limits, problems));
    problems += std::int64_t(ex.studies.back().problems.size());
  }
  return ex;
}

Experiment load_experiment(const std::filesystem::path& path, const FamilyCatalog& catalog) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::UserError(path.string() + ": cannot read experiment file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw core::UserError(path.string() + ": error while reading experiment file");
  return parse_experiment(text.str(), path.string(), catalog);
}

}  // namespace flashtune::experiment
