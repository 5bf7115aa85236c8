// db/peers.cpp: the peer_trials table (schema v6): Store::record_peer_trial and Store::peer_trials. Peers live apart
// from `trials` so that resume, best, export and warm start never see them.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "db/sqlite_util.hpp"
#include "db/store_impl.hpp"

namespace flashtune::db {

using detail::Stmt;
using detail::Transaction;

namespace {

constexpr const char* kPeerProblemFamily = "attn_fwd";  // the attention problem's family in `problems`

std::optional<double> opt_real(const Stmt& s, int i) { return s.is_null(i) ? std::nullopt : std::optional(s.real(i)); }

}  // namespace

std::int64_t Store::record_peer_trial(const PeerRecord& r) {
  if (r.pass != "fwd" && r.pass != "bwd") throw core::Error("record_peer_trial: pass must be fwd or bwd, not '" + r.pass + "'");
  if (r.status != "ok" && r.status != "unsupported" && r.status != "wrong_result" && r.status != "error")
    throw core::Error("record_peer_trial: status must be ok, unsupported, wrong_result or error, not '" + r.status + "'");
  if (r.peer.empty()) throw core::Error("record_peer_trial: empty peer name");
  Transaction tx(m_impl->db);
  const std::int64_t problem_id = m_impl->upsert_problem(kPeerProblemFamily, r.problem);
  Stmt s(m_impl->db,
         "INSERT INTO peer_trials (run_id, experiment_name, peer, library, pass, problem_id, device_key, status, reason, "
         "seed, median_ms, iqr_ms, min_ms, max_ms, mean_ms, rel_stdev, converged, cold, n_samples, samples_json, tflops, "
         "max_abs_err, max_rel_err, naive_err, tolerance, nan_count, checked_output, device_bytes, sm_clock_mhz, "
         "power_capped) VALUES "
         "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, "
         "?25, ?26, ?27, ?28, ?29, ?30)");
  s.bind(1, r.run_id).bind(2, r.experiment_name).bind(3, r.peer).bind(4, r.library).bind(5, r.pass).bind(6, problem_id)
      .bind(7, r.device_key).bind(8, r.status).bind(9, r.reason).bind(10, static_cast<std::int64_t>(r.seed))
      .bind(21, r.tflops).bind(27, r.checked_output).bind(28, r.device_bytes);
  if (const auto& m = r.timing) {
    s.bind(11, m->median_ms).bind(12, m->iqr_ms).bind(13, m->min_ms).bind(14, m->max_ms).bind(15, m->mean_ms)
        .bind(16, m->rel_stdev).bind(17, m->converged).bind(18, m->cold)
        .bind(19, static_cast<std::int64_t>(m->samples_ms.size())).bind(20, nlohmann::json(m->samples_ms).dump())
        .bind(29, m->sm_clock_mhz).bind(30, m->power_capped);
  }
  if (const auto& v = r.validation; v && v->checked)
    s.bind(22, v->max_abs_err).bind(23, v->max_rel_err).bind(24, v->naive_err).bind(25, v->tolerance)
        .bind(26, v->nan_count);
  s.run();
  const std::int64_t id = sqlite3_last_insert_rowid(m_impl->db);
  tx.commit();
  return id;
}

std::vector<PeerRow> Store::peer_trials(std::int64_t run_id) const {
  Stmt s(m_impl->db,
         "SELECT t.id, t.run_id, t.experiment_name, r.gpu_name, t.device_key, t.peer, t.library, t.pass, p.key, t.status, "
         "t.reason, t.median_ms, t.rel_stdev, t.tflops, t.max_abs_err, t.tolerance, t.n_samples, t.device_bytes, p.json, "
         "t.sm_clock_mhz, t.power_capped "
         "FROM peer_trials t JOIN runs r ON r.id = t.run_id JOIN problems p ON p.id = t.problem_id "
         "WHERE ?1 = 0 OR t.run_id = ?1 ORDER BY t.id");
  s.bind(1, run_id);
  std::vector<PeerRow> out;
  while (s.step()) {
    PeerRow r;
    r.id = s.int64(0), r.run_id = s.int64(1);
    r.experiment = s.text(2), r.gpu = s.text(3), r.device_key = s.text(4), r.peer = s.text(5), r.library = s.text(6);
    r.pass = s.text(7), r.problem = s.text(8), r.status = s.text(9), r.reason = s.text(10);
    r.median_ms = opt_real(s, 11), r.rel_stdev = opt_real(s, 12), r.tflops = opt_real(s, 13);
    r.max_abs_err = opt_real(s, 14), r.tolerance = opt_real(s, 15);
    r.n_samples = s.is_null(16) ? 0 : s.int64(16);
    if (!s.is_null(17)) r.device_bytes = s.int64(17);
    r.shape = read_problem_json(s.text(18));
    r.sm_clock_mhz = opt_real(s, 19), r.power_capped = opt_real(s, 20);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace flashtune::db
