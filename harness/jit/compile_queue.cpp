// harness/jit/compile_queue.cpp: Compiler's memory side: compile() looks in what the compiler made and what
// prefetch() queued or is compiling before it compiles itself; prefetch()'s background threads take the queue.
#include "harness/jit/compiler.hpp"

#include <algorithm>
#include <thread>

namespace flashtune::jit {

namespace fs = std::filesystem;

CompileOutput Compiler::compile(const CompileRequest& req) const {
  const std::string key = cache_key(req);
  std::shared_future<CompileOutput> pending;
  std::shared_ptr<std::promise<CompileOutput>> stolen;
  {
    std::lock_guard<std::mutex> lock(m_memo->mutex);
    if (auto it = m_memo->prefetched.find(key); it != m_memo->prefetched.end()) {
      CompileOutput out = std::move(it->second);
      m_memo->prefetched.erase(it);
      return out;
    }
    if (const auto it = m_memo->entries.find(key); it != m_memo->entries.end()) {
      CompileOutput out = it->second;
      out.record.cache_hit = true;
      out.record.compile_ms = 0;
      return out;
    }
    if (const auto it = m_memo->in_flight.find(key); it != m_memo->in_flight.end()) {
      auto& q = m_memo->queue;
      const auto queued = std::find_if(q.begin(), q.end(), [&](const auto& e) { return e.first == key; });
      if (queued == q.end()) {
        pending = it->second;  // a prefetch thread is compiling it
      } else {                 // still queued: compiled here rather than waited for
        stolen = std::move(queued->second.second);
        q.erase(queued);
      }
    }
  }
  if (pending.valid()) {  // the prefetch thread kept its output for its first taker: this call, or a later one
    CompileOutput out = pending.get();
    std::lock_guard<std::mutex> lock(m_memo->mutex);
    if (!m_memo->prefetched.erase(key)) out.record.cache_hit = true, out.record.compile_ms = 0;
    return out;
  }
  if (!stolen) return compile_now(req, key, m_cache_dir, *m_memo);
  return compile_promised(req, key, m_cache_dir, *m_memo, *stolen);
}

CompileOutput Compiler::compile_promised(const CompileRequest& req, const std::string& key,
                                         const std::optional<fs::path>& cache_dir, Memo& memo,
                                         std::promise<CompileOutput>& promise, bool keep_for_first_taker) {
  try {
    CompileOutput out = compile_now(req, key, cache_dir, memo);
    std::lock_guard<std::mutex> lock(memo.mutex);
    if (keep_for_first_taker) memo.prefetched.emplace(key, out);
    promise.set_value(out);
    memo.in_flight.erase(key);
    return out;
  } catch (...) {
    std::lock_guard<std::mutex> lock(memo.mutex);
    promise.set_exception(std::current_exception());
    memo.in_flight.erase(key);
    throw;
  }
}

Compiler::Memo::~Memo() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
    for (auto& q : queue) q.second.second->set_exception(std::make_exception_ptr(std::runtime_error("compiler destroyed")));
    queue.clear();
  }
  for (auto& w : workers)
    if (w.joinable()) w.join();
}

void Compiler::prefetch(std::vector<CompileRequest> reqs, unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency() > 1 ? std::thread::hardware_concurrency() - 1 : 1u);
  std::lock_guard<std::mutex> lock(m_memo->mutex);
  for (auto& req : reqs) {
    std::string key = cache_key(req);
    if (m_memo->entries.count(key) || m_memo->in_flight.count(key)) continue;
    auto promise = std::make_shared<std::promise<CompileOutput>>();
    m_memo->in_flight.emplace(key, promise->get_future().share());
    m_memo->queue.emplace_back(std::move(key), std::make_pair(std::move(req), std::move(promise)));
  }
  // At most `threads` run; when none does, the finished ones are joined first.
  if (m_memo->busy_workers == 0) {
    for (auto& w : m_memo->workers) w.join();
    m_memo->workers.clear();
  }
  while (m_memo->busy_workers < threads && m_memo->busy_workers < m_memo->queue.size()) {
    ++m_memo->busy_workers;
    m_memo->workers.emplace_back(&Compiler::prefetch_worker, m_memo.get(), m_cache_dir);
  }
}

std::size_t Compiler::prefetch_pending() const {
  std::lock_guard<std::mutex> lock(m_memo->mutex);
  return m_memo->queue.size();
}

// Takes queued requests until the queue is empty. A thread that finds the queue empty exits; prefetch()
// starts new ones while fewer than its limit are busy, and joins the exited ones when none is busy.
void Compiler::prefetch_worker(Memo* memo, std::optional<fs::path> cache_dir) {
  Memo& m = *memo;
  for (;;) {
    std::string key;
    CompileRequest req;
    std::shared_ptr<std::promise<CompileOutput>> promise;
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      if (m.stop || m.queue.empty()) {
        --m.busy_workers;
        return;
      }
      key = std::move(m.queue.front().first);
      req = std::move(m.queue.front().second.first);
      promise = std::move(m.queue.front().second.second);
      m.queue.pop_front();
    }
    try {
      compile_promised(req, key, cache_dir, m, *promise, true);
    } catch (...) {  // handed to whoever waits on the promise
    }
  }
}

}  // namespace flashtune::jit
