// Named time ranges for the profiler: `LMT_TRACE_SCOPE("attention");` records the scope's start and
// duration while tracing is on (Tracer::start), and costs one relaxed atomic load while it is off.
// Events are kept per thread and collected by Tracer::stop(). metrics/profiler.h turns them into a
// Chrome trace (Perfetto) and a summary table.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace lmt {

struct TraceEvent {
  const char* name;  // a string literal
  double start_us;   // since Tracer::start()
  double duration_us;
  int thread;        // small per-thread index
};

class Tracer {
 public:
  static void start();
  // Stops tracing and returns every event recorded since start(), ordered by start time.
  static std::vector<TraceEvent> stop();
  static bool active() { return active_.load(std::memory_order_relaxed); }
  static void record(const char* name, double start_us, double end_us);
  static double now_us();

 private:
  static std::atomic<bool> active_;
};

class TraceScope {
 public:
  explicit TraceScope(const char* name) : name_(Tracer::active() ? name : nullptr) {
    if (name_) start_ = Tracer::now_us();
  }
  ~TraceScope() {
    if (name_) Tracer::record(name_, start_, Tracer::now_us());
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const char* name_;
  double start_ = 0;
};

}  // namespace lmt

#define LMT_TRACE_CONCAT_INNER(a, b) a##b
#define LMT_TRACE_CONCAT(a, b) LMT_TRACE_CONCAT_INNER(a, b)
#define LMT_TRACE_SCOPE(name) ::lmt::TraceScope LMT_TRACE_CONCAT(lmt_trace_scope_, __LINE__)(name)
