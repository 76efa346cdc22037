// Summary statistics the benchmarks print.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace weir::bench {

// The value at fraction `p` (0..1) of the sorted values, the rank rounded to
// the nearest; 0 for none.
template <typename T>
double Percentile(std::vector<T> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return static_cast<double>(values[std::min(index, values.size() - 1)]);
}

}  // namespace weir::bench
