// Fuzz target: the bounded XML reader of the S3 client (common/fs/s3/xml.h),
// which reads whatever an S3 endpoint answers. Whatever the input, it must
// return, and a tree it accepts must respect the limits it was given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/fs/s3/xml.h"

namespace {

int64_t CountAndCheck(const weir::fs::s3::XmlElement& element, int depth, int max_depth) {
  if (depth > max_depth || element.name.empty()) std::abort();
  int64_t n = 1;
  for (const auto& child : element.children) n += CountAndCheck(child, depth + 1, max_depth);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const weir::fs::s3::XmlLimits limits{.max_bytes = 1 << 16, .max_depth = 8, .max_elements = 256};
  absl::StatusOr<weir::fs::s3::XmlElement> xml =
      weir::fs::s3::ParseXml(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (xml.ok() && CountAndCheck(*xml, 1, limits.max_depth) > limits.max_elements) std::abort();
  return 0;
}
