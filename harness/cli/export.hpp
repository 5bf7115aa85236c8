// harness/cli/export.hpp: best configs for other projects (JSON, CSV, a self-contained C++ header) and the
// course's two benchmark CSVs, all rendered from recorded trials (results.hpp).
#pragma once

#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/cli/results.hpp"

namespace flashtune::cli {

/// The nearest-problem rule, in words; the JSON carries it and the header's lookup() implements it.
extern const char* const kLookupRule;

/// JSON document: generator, schema, lookup_rule, entries (one per best config, with its evidence).
std::string export_json(const std::vector<TrialRow>& best);
/// CSV of the same entries, one per line.
std::string export_csv(const std::vector<TrialRow>& best);
/// A C++17 header: a constexpr table of the same entries and lookup(), compiling on its own.
std::string export_header(const std::vector<TrialRow>& best, const std::string& db_path);

/// outputs/softmax_matmul_benchmark.csv of the course (part 1): batch_size, d1, d2, d3, triton, BLOCK,
/// forward_ms_mean, forward_ms_std, forward_peak_MiB; one row per (problem, B = block_m = block_k) with
/// the fastest config of that B, times empty where no config of that B ran. Only fp32 problems with the
/// default x_range (the course's benchmark).
std::string course_softmax_matmul_csv(const std::vector<TrialRow>& trials);
/// outputs/csv/attention_benchmark.csv of the course (part 3): implementation, d_model, seq_len,
/// forward_ms, forward_peak_MiB, backward_ms, backward_peak_MiB, saved_activations_MiB, status, gpu. Peers
/// (`flashtune peers`, the latest per problem, GPU, pass and peer) join as rows "peer_<peer>_<dtype>...".
std::string course_attention_csv(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers = {});

}  // namespace flashtune::cli
