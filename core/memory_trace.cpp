// Why this file exists: the ring buffer behind MemoryTrace, the thread-local category and
// scope guards, and the raw JSON export. Scope paths are interned once when a ScopeGuard
// is entered, so an allocation only copies a 32-bit id.
#include "core/memory_trace.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace cg {

const char* category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::unknown: return "unknown";
    case MemoryCategory::parameter: return "parameter";
    case MemoryCategory::gradient: return "gradient";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activation: return "activation";
    case MemoryCategory::autograd_saved: return "autograd_saved";
    case MemoryCategory::temporary: return "temporary";
    case MemoryCategory::input: return "input";
  }
  return "unknown";
}

const char* action_name(TraceAction a) {
  switch (a) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free: return "free";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::oom: return "oom";
    case TraceAction::saved: return "saved";
    case TraceAction::phase_begin: return "phase_begin";
    case TraceAction::phase_end: return "phase_end";
  }
  return "?";
}

namespace {

struct TraceState {
  std::mutex mutex;
  std::vector<TraceEvent> ring;
  size_t next = 0;        // where the next event goes
  uint64_t recorded = 0;  // events since enable/clear
};

TraceState& state() {
  static auto* s = new TraceState();  // leaked: allocations may be traced at exit
  return *s;
}

struct ScopeTable {
  std::mutex mutex;
  std::vector<std::string> names{""};  // id 0 = top level
  std::unordered_map<std::string, uint32_t> ids{{"", 0}};
  uint32_t intern(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, inserted] = ids.emplace(path, static_cast<uint32_t>(names.size()));
    if (inserted) names.push_back(path);
    return it->second;
  }
};

ScopeTable& scopes() {
  static auto* t = new ScopeTable();
  return *t;
}

thread_local MemoryCategory t_category = MemoryCategory::unknown;
thread_local uint32_t t_scope = 0;

}  // namespace

std::atomic<bool> MemoryTrace::enabled_{false};

int64_t MemoryTrace::now_us() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

void MemoryTrace::enable(size_t capacity) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.ring.assign(capacity == 0 ? 1 : capacity, TraceEvent{});
  s.next = 0;
  s.recorded = 0;
  now_us();
  enabled_.store(true, std::memory_order_relaxed);
}

void MemoryTrace::disable() { enabled_.store(false, std::memory_order_relaxed); }

void MemoryTrace::clear() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.next = 0;
  s.recorded = 0;
}

void MemoryTrace::record(TraceAction action, Device device, uint64_t addr, uint64_t size,
                         uint64_t requested) {
  record(action, device, addr, size, requested, t_category, t_scope, kDefaultStream);
}

void MemoryTrace::record(TraceAction action, Device device, uint64_t addr, uint64_t size,
                         uint64_t requested, MemoryCategory category, uint32_t scope_id,
                         StreamId stream) {
  if (!enabled()) return;
  TraceEvent e;
  e.time_us = now_us();
  e.addr = addr;
  e.size = size;
  e.requested = requested;
  e.scope_id = scope_id;
  e.stream = stream;
  e.device = device;
  e.action = action;
  e.category = category;
  push(e);
}

void MemoryTrace::record_saved(Device device, uint64_t addr, uint64_t size,
                               const std::string& holder) {
  if (!enabled()) return;
  TraceEvent e;
  e.time_us = now_us();
  e.addr = addr;
  e.size = e.requested = size;
  e.scope_id = t_scope;
  e.label_id = intern(holder);
  e.device = device;
  e.action = TraceAction::saved;
  e.category = t_category;
  push(e);
}

void MemoryTrace::record_phase(TraceAction begin_or_end, const std::string& name) {
  if (!enabled()) return;
  TraceEvent e;
  e.time_us = now_us();
  e.scope_id = t_scope;
  e.label_id = intern(name);
  e.action = begin_or_end;
  push(e);
}

void MemoryTrace::push(const TraceEvent& e) {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.ring.empty()) return;
  s.ring[s.next] = e;
  s.next = (s.next + 1) % s.ring.size();
  ++s.recorded;
}

std::vector<TraceEvent> MemoryTrace::events() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<TraceEvent> out;
  if (s.ring.empty()) return out;
  const size_t n = std::min<uint64_t>(s.recorded, s.ring.size());
  out.reserve(n);
  const size_t first = s.recorded > s.ring.size() ? s.next : 0;
  for (size_t i = 0; i < n; ++i) out.push_back(s.ring[(first + i) % s.ring.size()]);
  return out;
}

uint64_t MemoryTrace::dropped() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.recorded > s.ring.size() ? s.recorded - s.ring.size() : 0;
}

size_t MemoryTrace::capacity() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.ring.size();
}

uint32_t MemoryTrace::intern(const std::string& text) { return scopes().intern(text); }

std::string MemoryTrace::scope_name(uint32_t id) {
  ScopeTable& t = scopes();
  std::lock_guard<std::mutex> lock(t.mutex);
  return id < t.names.size() ? t.names[id] : std::string("?");
}

nlohmann::json MemoryTrace::to_json() {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : MemoryTrace::events()) {
    nlohmann::json& j = events.emplace_back(nlohmann::json{{"action", action_name(e.action)},
                                                           {"time_us", e.time_us},
                                                           {"addr", e.addr},
                                                           {"size", e.size},
                                                           {"requested", e.requested},
                                                           {"device", e.device.str()},
                                                           {"stream", e.stream},
                                                           {"category", category_name(e.category)},
                                                           {"scope", scope_name(e.scope_id)}});
    if (e.label_id != 0) j["label"] = scope_name(e.label_id);
  }
  return {{"format", "chunkgrad.memory_trace"},
          {"version", 1},
          {"capacity", capacity()},
          {"dropped", dropped()},
          {"events", std::move(events)}};
}

MemoryCategory current_category() { return t_category; }
uint32_t current_scope_id() { return t_scope; }
std::string current_scope() { return MemoryTrace::scope_name(t_scope); }

CategoryGuard::CategoryGuard(MemoryCategory category) : saved_(t_category) {
  t_category = category;
}
CategoryGuard::~CategoryGuard() { t_category = saved_; }

ScopeGuard::ScopeGuard(const std::string& name) : saved_(t_scope) {
  const std::string parent = MemoryTrace::scope_name(t_scope);
  t_scope = scopes().intern(parent.empty() ? name : parent + "/" + name);
}
ScopeGuard::~ScopeGuard() { t_scope = saved_; }

TracePhase::TracePhase(std::string name) : name_(std::move(name)) {
  MemoryTrace::record_phase(TraceAction::phase_begin, name_);
}
TracePhase::~TracePhase() { MemoryTrace::record_phase(TraceAction::phase_end, name_); }

}  // namespace cg
