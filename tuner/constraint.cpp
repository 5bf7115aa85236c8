// tuner/constraint.cpp: ConstraintSet on muparser, with %, mod, integer division and power-of-two tests.
#include "tuner/constraint.hpp"

#include <muParser.h>

#include <cfenv>
#include <cmath>
#include <map>

namespace flashtune::tuner {

namespace {

// Set by the operators below when their divisor is 0; cleared before each evaluation. The built-in '/'
// is caught by the FE_DIVBYZERO / FE_INVALID flags instead (muparser's optimizer is off, so every
// division runs at evaluation time rather than being folded into a constant at parse time).
thread_local bool t_divided_by_zero = false;
double divisor(double b) {
  if (b == 0) t_divided_by_zero = true;
  return b;
}

double op_mod(double a, double b) { return std::fmod(a, divisor(b)); }
double op_not(double a) { return a == 0 ? 1.0 : 0.0; }
double fn_floor(double a) { return std::floor(a); }
double fn_ceil(double a) { return std::ceil(a); }
double fn_idiv(double a, double b) { return std::floor(a / divisor(b)); }
double fn_cdiv(double a, double b) { return std::ceil(a / divisor(b)); }
double fn_is_pow2(double x) {
  if (!(x >= 1) || x != std::floor(x) || x > 9.007199254740992e15) return 0;
  const auto v = static_cast<std::uint64_t>(x);
  return (v & (v - 1)) == 0 ? 1.0 : 0.0;
}
double fn_divides(double a, double b) { return a != 0 && std::fmod(b, a) == 0 ? 1.0 : 0.0; }

void add_builtins(mu::Parser& p) {
  p.DefineOprt("%", op_mod, mu::prMUL_DIV, mu::oaLEFT, true);
  p.DefineInfixOprt("!", op_not);
  p.DefineFun("mod", op_mod);
  p.DefineFun("floor", fn_floor);
  p.DefineFun("ceil", fn_ceil);
  p.DefineFun("idiv", fn_idiv);
  p.DefineFun("cdiv", fn_cdiv);
  p.DefineFun("is_pow2", fn_is_pow2);
  p.DefineFun("divides", fn_divides);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

ConstraintError::ConstraintError(std::string expression, std::string message, int position)
    : core::UserError("constraint '" + expression + "': " + message),
      m_expression(std::move(expression)),
      m_message(std::move(message)),
      m_position(position) {}

ConstraintEvalError::ConstraintEvalError(const std::string& expression, const core::Config& config,
                                         const core::Problem& problem, const std::string& what)
    : core::UserError("constraint '" + expression + "' " + what + " for config {" + config.key() + "} on problem {" +
                      problem.key() + "}: guard the divisor with an earlier constraint (e.g. 'rows_per_block > 1' "
                      "before 'x / (rows_per_block - 1) > 1') or with c ? a : b"),
      m_expression(expression) {}

// One parser per expression; every parser points into `values`, whose addresses never change.
struct ConstraintSet::Impl {
  std::unique_ptr<double[]> values;
  std::vector<std::unique_ptr<mu::Parser>> parsers;
  std::vector<std::vector<std::size_t>> used;  // per expression: indices into variables
};

ConstraintSet::ConstraintSet() : ConstraintSet({}, {}) {}

ConstraintSet::ConstraintSet(std::vector<std::string> expressions, std::vector<std::string> variables)
    : m_expressions(std::move(expressions)), m_variables(std::move(variables)), m_impl(std::make_unique<Impl>()) {
  m_impl->values = std::make_unique<double[]>(m_variables.size() + 1);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < m_variables.size(); ++i) index.emplace(m_variables[i], i);

  for (const auto& expr : m_expressions) {
    auto p = std::make_unique<mu::Parser>();
    p->EnableOptimizer(false);  // no constant folding: a division by zero must happen in violated()
    add_builtins(*p);
    for (std::size_t i = 0; i < m_variables.size(); ++i) {
      try {
        p->DefineVar(m_variables[i], &m_impl->values[i]);
      } catch (const mu::Parser::exception_type& e) {
        throw core::Error("invalid constraint variable name '" + m_variables[i] + "': " + e.GetMsg());
      }
    }
    std::vector<std::size_t> used;
    try {
      p->SetExpr(expr);
      // GetUsedVar parses without evaluating and also lists names that are not defined.
      for (const auto& [name, ptr] : p->GetUsedVar()) {
        auto it = index.find(name);
        if (it == index.end()) {
          const auto pos = expr.find(name);
          throw ConstraintError(expr, "unknown variable '" + name + "' (known: " + join(m_variables) + ")",
                                pos == std::string::npos ? -1 : static_cast<int>(pos));
        }
        used.push_back(it->second);
      }
      p->Eval();  // builds the bytecode; catches errors GetUsedVar lets through
    } catch (const mu::Parser::exception_type& e) {
      throw ConstraintError(expr, e.GetMsg(), e.GetPos());
    }
    m_impl->parsers.push_back(std::move(p));
    m_impl->used.push_back(std::move(used));
  }
}

ConstraintSet::ConstraintSet(const ConstraintSet& other) : ConstraintSet(other.m_expressions, other.m_variables) {}
ConstraintSet& ConstraintSet::operator=(const ConstraintSet& other) {
  if (this != &other) *this = ConstraintSet(other);
  return *this;
}
ConstraintSet::ConstraintSet(ConstraintSet&&) noexcept = default;
ConstraintSet& ConstraintSet::operator=(ConstraintSet&&) noexcept = default;
ConstraintSet::~ConstraintSet() = default;

std::optional<std::string> ConstraintSet::violated(const core::Config& config, const core::Problem& problem) const {
  for (std::size_t e = 0; e < m_expressions.size(); ++e) {
    for (std::size_t i : m_impl->used[e]) {
      const std::string& name = m_variables[i];
      double& slot = m_impl->values[i];
      if (auto c = config.values.find(name); c != config.values.end()) {
        slot = static_cast<double>(c->second);
      } else if (auto d = problem.dims.find(name); d != problem.dims.end()) {
        slot = static_cast<double>(d->second);
      } else if (name == "dtype_bytes") {
        slot = static_cast<double>(core::dtype_size(problem.dtype));
      } else {
        throw core::Error("constraint '" + m_expressions[e] + "' uses '" + name + "', which config {" +
                          config.key() + "} and problem {" + problem.key() + "} do not provide");
      }
    }
    double v;
    t_divided_by_zero = false;
    std::feclearexcept(FE_DIVBYZERO | FE_INVALID);
    try {
      v = m_impl->parsers[e]->Eval();
    } catch (const mu::Parser::exception_type& ex) {
      throw core::Error("constraint '" + m_expressions[e] + "': " + ex.GetMsg());
    }
    const bool by_zero = t_divided_by_zero || std::fetestexcept(FE_DIVBYZERO);
    if (by_zero || std::fetestexcept(FE_INVALID) || std::isnan(v))
      throw ConstraintEvalError(m_expressions[e], config, problem,
                                by_zero ? "divides by zero" : "has no value (0 / 0, or a root or log of a negative)");
    if (v == 0) return m_expressions[e];
  }
  return std::nullopt;
}

}  // namespace flashtune::tuner
