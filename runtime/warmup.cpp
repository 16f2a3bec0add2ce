// warmup(): compile a list of specs on a thread pool (include/flashgen/warmup.hpp).
#include "flashgen/warmup.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "flashgen/flashgen.hpp"

namespace flashgen {

std::vector<WarmupResult> warmup(const std::vector<KernelSpec>& specs, int threads, const WarmupCallback& progress) {
  if (threads < 0) {
    throw InvalidArgument(fmt::format("warmup: threads ({}) must be >= 0 (0: one per hardware thread)", threads));
  }
  std::vector<WarmupResult> results(specs.size());
  if (specs.empty()) return results;
  size_t n = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  n = std::min(n, specs.size());

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::mutex mu;  // guards the counters and serializes the callback
  WarmupProgress counts;
  counts.total = specs.size();

  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
      WarmupResult& r = results[i];
      r.spec = specs[i];
      const auto s0 = std::chrono::steady_clock::now();
      try {
        CompiledKernel ck = compile(specs[i]);
        r.ok = true;
        r.from_cache = ck.from_cache;
        r.cache_path = std::move(ck.cache_path);
        r.compile_log = std::move(ck.compile_log);
      } catch (const Error& e) {
        r.error_code = e.code();
        r.error = e.what();
      } catch (const std::exception& e) {
        r.error_code = ErrorCode::internal;
        r.error = e.what();
      }
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      std::lock_guard<std::mutex> lock(mu);
      ++counts.done;
      if (!r.ok) {
        ++counts.failed;
      } else if (r.from_cache) {
        ++counts.cached;
      } else {
        ++counts.compiled;
      }
      counts.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      counts.last = &r;
      if (progress) {
        try {
          progress(counts);
        } catch (...) {
          // A throwing callback must not take down the pool; progress is advisory.
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  for (size_t t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return results;
}

}  // namespace flashgen
