#include "common/http/metric_families.h"

#include "prometheus/text_serializer.h"

namespace weir::http {

prometheus::MetricFamily* MetricFamilies::Family(const std::string& name, const std::string& help,
                                                 prometheus::MetricType type) {
  for (prometheus::MetricFamily& family : families_) {
    // A name has one type: a sample of the other type is left out.
    if (family.name == name) return family.type == type ? &family : nullptr;
  }
  families_.push_back(prometheus::MetricFamily{name, help, type, {}});
  return &families_.back();
}

void MetricFamilies::Gauge(const std::string& name, const std::string& help, MetricLabels labels, double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  if (prometheus::MetricFamily* family = Family(name, help, prometheus::MetricType::Gauge)) {
    family->metric.push_back(std::move(metric));
  }
}

void MetricFamilies::Counter(const std::string& name, const std::string& help, MetricLabels labels, double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  if (prometheus::MetricFamily* family = Family(name, help, prometheus::MetricType::Counter)) {
    family->metric.push_back(std::move(metric));
  }
}

std::string MetricFamilies::Text() const { return prometheus::TextSerializer().Serialize(families_); }

}  // namespace weir::http
