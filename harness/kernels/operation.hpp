// harness/kernels/operation.hpp: an operation and its variants. An operation (a KernelFamily: attention forward,
// each backward stage, softmax, ...) owns what every implementation of it shares: the problem, its buffers,
// reference, FLOP and byte counts, tolerance, kernel arguments, and the tunables all its kernels read. A variant
// owns one kernel: its template file, its own tunables, constraints, can_run, name expression and launch shape.
// The operation picks the variant a config selects in one place (variant_for); the choice is itself a tunable
// the strategies search (the selector, e.g. attn_fwd's `mma`: 80 = mma.sync, 90 = wgmma), so recorded configs
// keep their keys and meaning. A new variant is one template file, one Variant and one add_variant() line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/kernels/family.hpp"

namespace flashtune::kernels {

/// true: Specialization::template_file names each variant's own template (VariantInfo::template_file), so a
/// config compiles from, and its source hash covers, that file's include closure alone (kernel_templates/ holds
/// one file per kernel since the device library, issue 18). false: it stays empty and every config compiles from
/// its operation's template_file() (the layout before that split, when attn_fwd.cuh included every forward).
inline constexpr bool kSplitTemplates = true;

/// A template argument of a name expression: the kernel templates' storage type of a dtype ("float", "ft_half",
/// "ft_bf16"; kernel_templates/ft_common.cuh).
inline const char* storage_type(core::DType d) {
  switch (d) {
    case core::DType::f32: return "float";
    case core::DType::f16: return "ft_half";
    case core::DType::bf16: return "ft_bf16";
  }
  throw core::Error("storage_type: unknown dtype");
}
/// A template argument of a name expression: "true" / "false".
inline const char* bool_arg(std::int64_t v) { return v ? "true" : "false"; }

/// What a variant is, apart from what it computes.
struct VariantInfo {
  std::string name;                      ///< "sm80_mma": unique within its operation
  std::string template_file;             ///< its file in kernel_templates/ ("attn_fwd_sm90.cuh")
  std::vector<core::DType> dtypes;       ///< problem dtypes it runs
  std::int64_t selector = 0;             ///< the selector value that picks it (ignored when the operation has none)
  std::string selector_doc;              ///< its part of the selector's doc ("80 = mma.sync (sm_80+)"); empty: none
  std::vector<TunableSpec> tunables;     ///< its own, beyond the operation's shared ones (kept at 1 by the others)
  std::vector<std::string> constraints;  ///< its own, in the operation's constraint syntax

  bool takes(core::DType d) const { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); }
};

/// One kernel of an operation whose problems read as `Shape` and configs as `Tunables` (problem_views.hpp,
/// config_views.hpp).
template <typename Shape, typename Tunables>
class Variant {
 public:
  explicit Variant(VariantInfo info) : m_info(std::move(info)) {}
  virtual ~Variant() = default;
  const VariantInfo& info() const { return m_info; }

  /// nullopt when this kernel can run config c on problem s and device d, else why not (recorded as invalid_config).
  virtual std::optional<std::string> can_run(const Tunables& c, const Shape& s, const core::DeviceLimits& d) const = 0;
  /// The instantiation NVRTC compiles, e.g. "attn_fwd_mma_kernel<ft_half, 64, 128, 64, 4, 2, true, false, false>".
  virtual std::string name_expression(const Tunables& c, const Shape& s) const = 0;
  virtual std::vector<std::string> defines(const Tunables&, const Shape&) const { return {}; }
  virtual LaunchShape launch_shape(const Tunables& c, const Shape& s, const core::DeviceLimits& d) const = 0;
  /// The kernel's arguments, given the operation's (`shared`: what every variant of it takes); a variant whose kernel
  /// takes more (a larger parameter struct: the TMA forward's tensor maps) extends them. Default: `shared` itself.
  virtual std::vector<KernelArg> arguments(const Tunables&, const Shape&, std::vector<KernelArg> shared) const {
    return shared;
  }

 private:
  VariantInfo m_info;
};

/// The type-free face of an operation: its variants' descriptions and which one a config selects (tests, the CLI).
class OperationBase : public KernelFamily {
 public:
  virtual std::vector<const VariantInfo*> variant_infos() const = 0;
  /// The variant config c runs on problem p (see Operation::variant_for).
  virtual const VariantInfo& selected(const core::Config& c, const core::Problem& p) const = 0;
};

/// An operation over problems viewed as `Shape` and configs as `Tunables`; a subclass registers its variants in its
/// constructor (add_variant) and says the rest of KernelFamily (name, problem, buffers, arguments, reference...).
template <typename Shape, typename Tunables>
class Operation : public OperationBase {
 public:
  using VariantType = Variant<Shape, Tunables>;

  /// The tunable whose value picks the variant, its field in `Tunables` (whose default is what a config recorded
  /// before the tunable ran) and the start of its doc (the variants' selector_doc follow).
  struct Selector {
    std::string tunable;
    std::int64_t Tunables::*field = nullptr;
    std::string doc;
  };

  /// Registers variant v. Order matters: the first variant that takes a dtype is that dtype's fallback.
  void add_variant(std::unique_ptr<VariantType> v) { m_variants.push_back(std::move(v)); }
  const std::vector<std::unique_ptr<VariantType>>& variants() const { return m_variants; }

  /// The one dispatch: among the variants that take s.dtype, the one whose selector value c names, else the first
  /// of them (whose can_run says why the config's selector value is not its own). Throws core::Error when no
  /// variant takes the dtype (check_problem refuses such problems first; can_run says so).
  const VariantType& variant_for(const Tunables& c, const Shape& s) const {
    if (const VariantType* v = find_variant(c, s)) return *v;
    throw core::Error(no_variant(s));
  }

  std::vector<const VariantInfo*> variant_infos() const override {
    std::vector<const VariantInfo*> out;
    for (const auto& v : m_variants) out.push_back(&v->info());
    return out;
  }
  const VariantInfo& selected(const core::Config& c, const core::Problem& p) const override {
    return variant_for(Tunables(c), Shape(p)).info();
  }

  /// shared_tunables(), then the selector (its values: the variants' selector values in registration order),
  /// then each variant's own tunables.
  std::vector<TunableSpec> tunables() const override {
    auto out = shared_tunables();
    if (m_selector) {
      TunableSpec sel{m_selector->tunable, selector_values(), m_selector->doc};
      std::string docs;
      for (const auto& v : m_variants)
        if (!v->info().selector_doc.empty()) docs += (docs.empty() ? "" : ", ") + v->info().selector_doc;
      sel.doc += docs;
      out.push_back(std::move(sel));
    }
    for (const auto& v : m_variants)
      for (const auto& t : v->info().tunables)
        if (std::none_of(out.begin(), out.end(), [&](const TunableSpec& o) { return o.name == t.name; })) out.push_back(t);
    return out;
  }
  /// shared_constraints(), the selector's values ("mma == 80 || mma == 90"), then each variant's own.
  std::vector<std::string> constraints() const override {
    auto out = shared_constraints();
    if (m_selector) {
      std::string any;
      for (std::int64_t v : selector_values())
        any += (any.empty() ? "" : " || ") + m_selector->tunable + " == " + std::to_string(v);
      out.push_back(any);
    }
    for (const auto& v : m_variants) out.insert(out.end(), v->info().constraints.begin(), v->info().constraints.end());
    return out;
  }

  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p,
                                     const core::DeviceLimits& d) const final {
    const Tunables c(config);
    const Shape s(p);
    if (auto why = check_config(c, s, d)) return why;
    const VariantType* v = find_variant(c, s);
    return v ? v->can_run(c, s, d) : std::optional<std::string>(no_variant(s));
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const final {
    const Tunables c(config);
    const Shape s(p);
    const VariantType& v = variant_for(c, s);
    return {v.name_expression(c, s), v.defines(c, s), kSplitTemplates ? v.info().template_file : std::string()};
  }
  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits& d) const final {
    const Tunables c(config);
    const Shape s(p);
    return variant_for(c, s).launch_shape(c, s, d);
  }

 protected:
  explicit Operation(std::optional<Selector> selector = std::nullopt) : m_selector(std::move(selector)) {}

  /// The tunables every variant reads (tiles, threads), with their default search values.
  virtual std::vector<TunableSpec> shared_tunables() const = 0;
  virtual std::vector<std::string> shared_constraints() const { return {}; }
  /// Why config c cannot run on problem s whatever its variant (checked before the variant's can_run); nullopt: go on.
  virtual std::optional<std::string> check_config(const Tunables&, const Shape&, const core::DeviceLimits&) const {
    return std::nullopt;
  }

 private:
  /// variant_for()'s choice, or nullptr when no variant takes s.dtype.
  const VariantType* find_variant(const Tunables& c, const Shape& s) const {
    const VariantType* first = nullptr;
    for (const auto& v : m_variants) {
      if (!v->info().takes(s.dtype)) continue;
      if (!first) first = v.get();
      if (m_selector && v->info().selector == c.*(m_selector->field)) return v.get();
    }
    return first;
  }
  std::string no_variant(const Shape& s) const {
    return this->name() + " has no variant for dtype " + std::string(core::to_string(s.dtype));
  }
  /// The variants' selector values, each once, in registration order.
  std::vector<std::int64_t> selector_values() const {
    std::vector<std::int64_t> values;
    for (const auto& v : m_variants)
      if (std::find(values.begin(), values.end(), v->info().selector) == values.end()) values.push_back(v->info().selector);
    return values;
  }

  std::optional<Selector> m_selector;
  std::vector<std::unique_ptr<VariantType>> m_variants;
};

}  // namespace flashtune::kernels
