// harness/runner/shard.cpp: parsing `--shard I/N` and the MPI / Slurm environment variables.
#include "harness/runner/shard.hpp"

#include <optional>

#include "harness/core/types.hpp"

namespace flashtune::runner {
namespace {

std::optional<long long> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 12) return std::nullopt;
  std::size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (std::size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  return std::stoll(s);
}

Shard checked(long long index, long long count, const std::string& what, const std::string& shown) {
  if (count < 1 || index < 0 || index >= count || count > 1000000)
    throw core::UserError(what + " '" + shown + "': need 0 <= I < N (shard I of N)");
  return Shard{int(index), int(count), what};
}

}  // namespace

Shard parse_shard(const std::string& text, const std::string& what) {
  const auto slash = text.find('/');
  const auto i = slash == std::string::npos ? std::nullopt : whole_number(text.substr(0, slash));
  const auto n = slash == std::string::npos ? std::nullopt : whole_number(text.substr(slash + 1));
  if (!i || !n) throw core::UserError(what + " '" + text + "': expected I/N, e.g. 0/4 (shard I of N, from 0)");
  return checked(*i, *n, what, text);
}

Shard shard_from_environment(const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    return v && *v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto number = [&](const char* name) -> long long {
    const auto v = whole_number(*get(name));
    if (!v) throw core::UserError(std::string("environment variable ") + name + "='" + *get(name) + "' is not a whole number");
    return *v;
  };
  auto pair = [&](const char* rank, const char* size) -> std::optional<Shard> {
    if (!get(rank) || !get(size)) return std::nullopt;
    const std::string what = std::string(rank) + "/" + size;
    return checked(number(rank), number(size), what, *get(rank) + "/" + *get(size));
  };
  if (auto s = pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) return *s;
  if (auto s = pair("PMI_RANK", "PMI_SIZE")) return *s;
  if (get("SLURM_ARRAY_TASK_ID")) {
    const long long id = number("SLURM_ARRAY_TASK_ID");
    const long long step = get("SLURM_ARRAY_TASK_STEP") ? number("SLURM_ARRAY_TASK_STEP") : 1;
    if (step < 1) throw core::UserError("environment variable SLURM_ARRAY_TASK_STEP must be >= 1");
    const long long min = get("SLURM_ARRAY_TASK_MIN") ? number("SLURM_ARRAY_TASK_MIN") : 0;
    long long count = 0;
    if (get("SLURM_ARRAY_TASK_COUNT")) count = number("SLURM_ARRAY_TASK_COUNT");
    else if (get("SLURM_ARRAY_TASK_MIN") && get("SLURM_ARRAY_TASK_MAX")) count = (number("SLURM_ARRAY_TASK_MAX") - min) / step + 1;
    else throw core::UserError("SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MIN/MAX");
    if ((id - min) % step != 0)
      throw core::UserError("SLURM_ARRAY_TASK_ID=" + std::to_string(id) + " is not on the array's grid (min " +
                            std::to_string(min) + ", step " + std::to_string(step) + ")");
    Shard s = checked((id - min) / step, count, "SLURM_ARRAY_TASK_ID", std::to_string(id) + " of " + std::to_string(count));
    if (auto tasks = pair("SLURM_PROCID", "SLURM_NTASKS"); tasks && tasks->count > 1) {
      s = checked(s.index * tasks->count + tasks->index, s.count * tasks->count, "SLURM_ARRAY_TASK_ID x SLURM_PROCID",
                  s.text() + " x " + tasks->text());
    }
    return s;
  }
  if (auto s = pair("SLURM_PROCID", "SLURM_NTASKS")) return *s;
  return Shard{};
}

}  // namespace flashtune::runner
