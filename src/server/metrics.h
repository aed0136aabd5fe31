// The engine's counters (runtime/metrics.h) in Prometheus text form (GET /metrics).
#pragma once

#include <string>

#include "runtime/metrics.h"

namespace lr::server {

// The snapshot as Prometheus text exposition (version 0.0.4).
std::string prometheus_text(const Metrics::Snapshot& s);

}  // namespace lr::server
