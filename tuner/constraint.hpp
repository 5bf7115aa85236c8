// tuner/constraint.hpp: constraints between tunables and problem dimensions, written as expressions
// ("block_threads * vec <= cols", "cols % (block_threads * vec) == 0") and evaluated with muparser.
// They prune a search space before anything is compiled; a config that violates one is never tried.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

// An expression that does not parse or names an unknown variable. A user error: constraints come from
// experiment files (the loader adds file:line) and from kernel families.
class ConstraintError : public core::UserError {
 public:
  ConstraintError(std::string expression, std::string message, int position);
  const std::string& expression() const { return m_expression; }
  const std::string& message() const { return m_message; }  ///< without the expression
  int position() const { return m_position; }               ///< 0-based character offset; -1: none
 private:
  std::string m_expression, m_message;
  int m_position;
};

// A constraint whose value is undefined for one config and problem: it divides by zero ('/', '%', mod,
// idiv, cdiv with a zero divisor) or is NaN. Silently counting that as "holds" (x / 0 = inf > 1) or
// "violated" would prune the space for a reason nobody wrote, so it is a user error naming both.
class ConstraintEvalError : public core::UserError {
 public:
  ConstraintEvalError(const std::string& expression, const core::Config& config, const core::Problem& problem,
                      const std::string& what);
  const std::string& expression() const { return m_expression; }

 private:
  std::string m_expression;
};

// A list of constraint expressions over a fixed set of variables. A constraint holds when its value
// is nonzero; dividing by zero or a NaN value is an error (ConstraintEvalError), never a verdict. Values are doubles, so integers are exact up to 2^53.
//
// Syntax (muparser 2.3 plus the additions marked *):
//   numbers, variables, ( )
//   + - * /        arithmetic; '/' is real division: use idiv() or cdiv() for integer division
//   % *            remainder, same precedence as * and / (C fmod: sign of the left operand)
//   ^              power
//   == != < <= > >=  comparisons (1 or 0)
//   && ||          logical and / or;   ! * logical not;   c ? a : b   conditional
//   min(a, b, ...) max(a, b, ...) sum(...) avg(...) abs(x) sqrt(x) log2(x) exp(x) sign(x) rint(x)
//   mod(a, b) *    same as a % b;         floor(x) *   ceil(x) *
//   idiv(a, b) *   floor(a / b)           cdiv(a, b) *  ceil(a / b)
//   is_pow2(x) *   1 when x is a positive integer power of two, else 0
//   divides(a, b) * 1 when a divides b (a != 0 and b % a == 0), else 0
// Variables: the names given at construction, typically the family's tunables, its problem
// dimensions and `dtype_bytes` (bytes per element of the problem's dtype).
//
// Not thread-safe: violated() writes the variables' storage. Copying builds fresh parsers.
class ConstraintSet {
 public:
  ConstraintSet();  ///< no constraints, no variables
  /// Parses every expression; throws ConstraintError for the first that does not parse or uses a
  /// name outside `variables`. Throws core::Error for an invalid variable name.
  ConstraintSet(std::vector<std::string> expressions, std::vector<std::string> variables);
  ConstraintSet(const ConstraintSet& other);
  ConstraintSet& operator=(const ConstraintSet& other);
  ConstraintSet(ConstraintSet&&) noexcept;
  ConstraintSet& operator=(ConstraintSet&&) noexcept;
  ~ConstraintSet();

  /// The text of the first constraint (in construction order) that does not hold, or nullopt when all
  /// hold. Variables take the config's values, then the problem's dims, and `dtype_bytes` =
  /// core::dtype_size(problem.dtype). Throws core::Error when an expression uses a variable that
  /// neither the config nor the problem provides, and ConstraintEvalError when the first constraint
  /// that decides divides by zero or is NaN (later constraints are not evaluated once one fails, so an
  /// earlier one may guard a divisor: "rows_per_block > 1", then "x / (rows_per_block - 1) < 4").
  std::optional<std::string> violated(const core::Config& config, const core::Problem& problem) const;
  bool allows(const core::Config& config, const core::Problem& problem) const { return !violated(config, problem); }

  const std::vector<std::string>& expressions() const { return m_expressions; }
  const std::vector<std::string>& variables() const { return m_variables; }

 private:
  struct Impl;
  std::vector<std::string> m_expressions, m_variables;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace flashtune::tuner
