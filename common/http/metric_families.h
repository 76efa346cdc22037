// MetricFamilies: builds a Prometheus text-format page from values read at
// scrape time (prometheus-cpp's data types and serializer). The daemons keep
// their figures where they already are (task counters, the checkpoint
// coordinator's history) and copy them in per scrape, so nothing on a hot
// path touches a metrics registry.
//
// Thread-safety: none; one per scrape.
#pragma once

#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"

namespace weir::http {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

class MetricFamilies {
 public:
  // Adds one sample; the family is created with `help` the first time its
  // name is used, and keeps that type (a sample of the other type is left
  // out: one name, one type). Names follow Prometheus' conventions: weir_..., base
  // units, counters end in _total.
  void Gauge(const std::string& name, const std::string& help, MetricLabels labels, double value);
  void Counter(const std::string& name, const std::string& help, MetricLabels labels, double value);

  // The text exposition format (version 0.0.4).
  std::string Text() const;

 private:
  void Add(const std::string& name, const std::string& help, prometheus::MetricType type, MetricLabels labels,
           double value);
  // Null when `name` exists with another type.
  prometheus::MetricFamily* Family(const std::string& name, const std::string& help, prometheus::MetricType type);

  std::vector<prometheus::MetricFamily> families_;
};

// The Content-Type of Text().
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace weir::http
