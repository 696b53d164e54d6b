#include "lmt/base/trace.h"

#include <algorithm>
#include <chrono>
#include <mutex>

namespace lmt {
namespace {

using Clock = std::chrono::steady_clock;
Clock::time_point g_origin = Clock::now();
std::mutex g_mu;
std::vector<TraceEvent> g_events;  // guarded by g_mu
std::atomic<int> g_next_thread{0};

int thread_index() {
  thread_local int index = g_next_thread.fetch_add(1);
  return index;
}

}  // namespace

std::atomic<bool> Tracer::active_{false};

double Tracer::now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now() - g_origin).count();
}

void Tracer::start() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_events.clear();
  g_origin = Clock::now();
  active_.store(true);
}

std::vector<TraceEvent> Tracer::stop() {
  active_.store(false);
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<TraceEvent> out;
  out.swap(g_events);
  std::sort(out.begin(), out.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.start_us < b.start_us; });
  return out;
}

// Scopes are coarse (a handful per layer per step), so one mutex is cheap enough.
void Tracer::record(const char* name, double start_us, double end_us) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!active_.load(std::memory_order_relaxed)) return;
  g_events.push_back({name, start_us, end_us - start_us, thread_index()});
}

}  // namespace lmt
