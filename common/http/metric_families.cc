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

void MetricFamilies::Add(const std::string& name, const std::string& help, prometheus::MetricType type,
                         MetricLabels labels, double value) {
  prometheus::MetricFamily* family = Family(name, help, type);
  if (family == nullptr) return;
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  (type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value) = value;
  family->metric.push_back(std::move(metric));
}

void MetricFamilies::Gauge(const std::string& name, const std::string& help, MetricLabels labels, double value) {
  Add(name, help, prometheus::MetricType::Gauge, std::move(labels), value);
}

void MetricFamilies::Counter(const std::string& name, const std::string& help, MetricLabels labels, double value) {
  Add(name, help, prometheus::MetricType::Counter, std::move(labels), value);
}

std::string MetricFamilies::Text() const { return prometheus::TextSerializer().Serialize(families_); }

}  // namespace weir::http
