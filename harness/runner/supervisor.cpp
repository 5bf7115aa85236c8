// harness/runner/supervisor.cpp: re-exec after a crash or hang, the watchdog's exit path, and one worker
// process per GPU (supervisor.hpp).
#include "harness/runner/supervisor.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "harness/core/types.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::runner {
namespace {

char** g_argv = nullptr;  // remember_arguments()

char** remembered_argv() {
  if (!g_argv) throw core::Error("runner::remember_arguments was not called: no arguments to restart with");
  return g_argv;
}

// RunOptions::on_hang of a supervised run: inside the runner, with the GPU busy, so no unwinding through CUDA
// destructors on any path.
[[noreturn]] void restart_after_hang() {
  try {
    restart_after_crash("timed-out");
  } catch (const std::exception& e) {
    std::cerr << "flashtune run: error: " << e.what() << '\n';
  }
  std::_Exit(kHangExitStatus);
}

}  // namespace

void remember_arguments(char** argv) { g_argv = argv; }

void restart_after_crash(const char* why) {
  // A stop asked for while the kernel hung (the watchdog waits out its deadline first) would be lost with this
  // process image: the fresh one starts without it and runs on (session 31: `timeout 100` did not end a run whose
  // kernels deadlocked one after another, each restart resuming past the last).
  if (stop_requested())
    throw core::Error(std::string("stopped (SIGINT / SIGTERM) while a kernel ") + why +
                      ": not restarting; a rerun resumes past it");
  char** argv = remembered_argv();
  const char* env = std::getenv("FLASHTUNE_RESTARTS");
  const int restarts = env ? std::atoi(env) : 0;
  if (restarts >= kMaxRestarts)
    throw core::Error("gave up after " + std::to_string(restarts) + " restarts after " + why + " kernels");
  ::setenv("FLASHTUNE_RESTARTS", std::to_string(restarts + 1).c_str(), 1);
  std::cerr << "restarting in a fresh process to resume past the " << why << " config (" << restarts + 1 << ")\n";
  std::cout.flush();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    if (fd > 2) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  ::execv("/proc/self/exe", argv);
  throw core::Error(std::string("could not restart: ") + std::strerror(errno));
}

void end_after_hang(const Hang& hang, const std::function<void(const Hang&)>& record,
                    const std::function<void()>& on_hang) {
  if (record) record(hang);
  if (on_hang) on_hang();
  std::_Exit(kHangExitStatus);
}

RunSummary run_supervised(const experiment::Experiment& exp, RunOptions opts) {
  opts.on_hang = [] { restart_after_hang(); };
  std::signal(SIGINT, [](int) { request_stop(); });
  std::signal(SIGTERM, [](int) { request_stop(); });
  const RunSummary s = run_experiment(exp, opts);
  if (s.poisoned) restart_after_crash();
  return s;
}

int run_on_devices(const std::vector<int>& devices, const Shard& outer, bool allow_mixed, bool compile_only) {
  std::string why;
  if (!compile_only && cuda::driver_available(&why)) {
    const int n = cuda::device_count();
    std::string first_name;
    for (int d : devices) {
      if (d < 0 || d >= n) throw core::UserError("--devices: GPU " + std::to_string(d) + " out of range: " + std::to_string(n) + " GPU(s) found");
      const std::string name = cuda::query_device(d).name;
      if (first_name.empty()) first_name = name;
      else if (name != first_name && !allow_mixed)
        throw core::UserError("--devices: GPU " + std::to_string(devices[0]) + " is " + first_name + " but GPU " +
                              std::to_string(d) + " is " + name + "; timings of different models do not mix in one "
                              "tuning (--allow-mixed-gpus to run anyway, each trial keyed by its own GPU)");
    }
  }
  // The worker's arguments: ours without --devices, --shard and --allow-mixed-gpus, then its own.
  char** argv0 = remembered_argv();
  std::vector<std::string> base;
  for (int i = 0; argv0[i]; ++i) {
    const std::string a = argv0[i];
    if (a == "--devices" || a == "--shard") {
      if (!argv0[++i]) break;
      continue;
    }
    if (a.rfind("--devices=", 0) == 0 || a.rfind("--shard=", 0) == 0 || a == "--allow-mixed-gpus") continue;
    base.push_back(a);
  }
  const int k = int(devices.size());
  std::vector<pid_t> workers;
  for (int w = 0; w < k; ++w) {
    std::vector<std::string> args = base;
    const Shard mine{outer.index * k + w, outer.count * k, "--devices"};
    args.insert(args.end(), {"--device", std::to_string(devices[std::size_t(w)]), "--shard", mine.text()});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (const int rc = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ); rc != 0)
      throw core::Error(std::string("could not start the worker for GPU ") + std::to_string(devices[std::size_t(w)]) +
                        ": " + std::strerror(rc));
    std::cerr << "worker " << pid << ": GPU " << devices[std::size_t(w)] << ", shard " << mine.text() << '\n';
    workers.push_back(pid);
  }
  int worst = 0;
  for (std::size_t w = 0; w < workers.size(); ++w) {
    int st = 0;
    while (::waitpid(workers[w], &st, 0) < 0 && errno == EINTR) {
    }
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    std::cerr << "worker for GPU " << devices[w] << " ended with status " << code << '\n';
    worst = std::max(worst, code);
  }
  return worst;
}

}  // namespace flashtune::runner
