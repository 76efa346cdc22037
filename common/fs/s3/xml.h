// A small, bounded XML reader for S3's responses (ListObjectsV2, errors,
// multipart uploads, DeleteObjects): elements, their text and the five
// predefined and numeric character references. Attributes, comments,
// processing instructions and the declaration are skipped; DTDs and CDATA are
// refused (S3 sends neither). Names lose their namespace prefix.
//
// Bounds: the input's size, the nesting depth and the number of elements are
// capped, so that a hostile or broken server cannot exhaust memory or stack.
//
// Thread-safety: thread-safe (pure functions; an XmlElement is a value).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::fs::s3 {

struct XmlElement {
  std::string name;
  std::string text;  // the character data directly inside, concatenated
  std::vector<XmlElement> children;

  // The first child named `name`, or nullptr.
  const XmlElement* Child(absl::string_view name) const;
  // The text of the first child named `name`, or "" without one.
  std::string ChildText(absl::string_view name) const;
};

struct XmlLimits {
  int64_t max_bytes = 8 << 20;
  int max_depth = 16;
  int64_t max_elements = 100000;
};

// The document's root element; kInvalidArgument for malformed XML or
// input over a limit, naming what and where.
absl::StatusOr<XmlElement> ParseXml(absl::string_view document, const XmlLimits& limits = {});

}  // namespace weir::fs::s3
