#include "common/fs/s3/xml.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weir::fs::s3 {
namespace {

class Parser {
 public:
  Parser(absl::string_view in, const XmlLimits& limits) : in_(in), limits_(limits) {}

  absl::StatusOr<XmlElement> Document() {
    if (static_cast<int64_t>(in_.size()) > limits_.max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("XML document of ", in_.size(), " bytes exceeds the limit of ", limits_.max_bytes));
    }
    if (absl::Status s = SkipMisc(); !s.ok()) return s;
    if (pos_ >= in_.size() || in_[pos_] != '<') return Error("expected the root element");
    XmlElement root;
    if (absl::Status s = Element(root, 1); !s.ok()) return s;
    if (absl::Status s = SkipMisc(); !s.ok()) return s;
    if (pos_ != in_.size()) return Error("content after the root element");
    return root;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed XML at byte ", pos_, ": ", what));
  }

  bool StartsWith(absl::string_view s) const { return absl::StartsWith(in_.substr(pos_), s); }

  void SkipSpace() {
    while (pos_ < in_.size() && absl::ascii_isspace(static_cast<unsigned char>(in_[pos_]))) ++pos_;
  }

  // Skips to just past `end`; an error when it never comes.
  absl::Status SkipPast(absl::string_view end, absl::string_view what) {
    size_t at = in_.find(end, pos_);
    if (at == absl::string_view::npos) return Error(absl::StrCat("unterminated ", what));
    pos_ = at + end.size();
    return absl::OkStatus();
  }

  // Whitespace, comments, processing instructions (the declaration among them).
  absl::Status SkipMisc() {
    while (true) {
      SkipSpace();
      if (StartsWith("<?")) {
        if (absl::Status s = SkipPast("?>", "processing instruction"); !s.ok()) return s;
      } else if (StartsWith("<!--")) {
        if (absl::Status s = SkipPast("-->", "comment"); !s.ok()) return s;
      } else if (StartsWith("<!")) {
        return Error("DTDs and CDATA sections are not accepted");
      } else {
        return absl::OkStatus();
      }
    }
  }

  absl::StatusOr<std::string> Name() {
    size_t start = pos_;
    while (pos_ < in_.size()) {
      char c = in_[pos_];
      if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':') {
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == start) return Error("expected a name");
    absl::string_view name = in_.substr(start, pos_ - start);
    size_t colon = name.rfind(':');
    if (colon != absl::string_view::npos) name.remove_prefix(colon + 1);
    if (name.empty()) return Error("a name with an empty local part");
    return std::string(name);
  }

  absl::Status AppendText(absl::string_view raw, std::string& out) {
    size_t i = 0;
    while (i < raw.size()) {
      size_t amp = raw.find('&', i);
      if (amp == absl::string_view::npos) {
        absl::StrAppend(&out, raw.substr(i));
        break;
      }
      absl::StrAppend(&out, raw.substr(i, amp - i));
      size_t semi = raw.find(';', amp);
      if (semi == absl::string_view::npos || semi - amp > 10) return Error("bad character reference");
      absl::string_view ref = raw.substr(amp + 1, semi - amp - 1);
      if (ref == "amp") out.push_back('&');
      else if (ref == "lt") out.push_back('<');
      else if (ref == "gt") out.push_back('>');
      else if (ref == "quot") out.push_back('"');
      else if (ref == "apos") out.push_back('\'');
      else if (!ref.empty() && ref[0] == '#') {
        uint32_t code = 0;
        bool ok = ref.size() > 1 && (ref[1] == 'x' ? absl::SimpleHexAtoi(ref.substr(2), &code)
                                                   : absl::SimpleAtoi(ref.substr(1), &code));
        if (!ok || code == 0 || code > 0x10FFFF) return Error("bad numeric character reference");
        AppendUtf8(code, out);
      } else {
        return Error(absl::StrCat("unknown entity &", ref, ";"));
      }
      i = semi + 1;
    }
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t c, std::string& out) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }

  // At '<' of a start tag. Recursion is bounded by max_depth.
  absl::Status Element(XmlElement& element, int depth) {
    if (depth > limits_.max_depth) return Error(absl::StrCat("nesting deeper than ", limits_.max_depth));
    if (++elements_ > limits_.max_elements) return Error(absl::StrCat("more than ", limits_.max_elements, " elements"));
    ++pos_;  // '<'
    absl::StatusOr<std::string> name = Name();
    if (!name.ok()) return name.status();
    element.name = *std::move(name);
    // Attributes: skipped, but their quoted values may hold '>'.
    while (true) {
      SkipSpace();
      if (pos_ >= in_.size()) return Error("unterminated start tag");
      if (StartsWith("/>")) {
        pos_ += 2;
        return absl::OkStatus();
      }
      if (in_[pos_] == '>') {
        ++pos_;
        break;
      }
      if (absl::StatusOr<std::string> attr = Name(); !attr.ok()) return attr.status();
      SkipSpace();
      if (pos_ >= in_.size() || in_[pos_] != '=') return Error("expected '=' in an attribute");
      ++pos_;
      SkipSpace();
      if (pos_ >= in_.size() || (in_[pos_] != '"' && in_[pos_] != '\'')) return Error("expected a quoted value");
      char quote = in_[pos_++];
      size_t end = in_.find(quote, pos_);
      if (end == absl::string_view::npos) return Error("unterminated attribute value");
      pos_ = end + 1;
    }
    // Content.
    while (true) {
      size_t lt = in_.find('<', pos_);
      if (lt == absl::string_view::npos) return Error(absl::StrCat("unterminated element <", element.name, ">"));
      if (absl::Status s = AppendText(in_.substr(pos_, lt - pos_), element.text); !s.ok()) return s;
      pos_ = lt;
      if (StartsWith("</")) {
        pos_ += 2;
        absl::StatusOr<std::string> end = Name();
        if (!end.ok()) return end.status();
        if (*end != element.name) {
          return Error(absl::StrCat("</", *end, "> closes <", element.name, ">"));
        }
        SkipSpace();
        if (pos_ >= in_.size() || in_[pos_] != '>') return Error("unterminated end tag");
        ++pos_;
        return absl::OkStatus();
      }
      if (StartsWith("<!--")) {
        if (absl::Status s = SkipPast("-->", "comment"); !s.ok()) return s;
        continue;
      }
      if (StartsWith("<?")) {
        if (absl::Status s = SkipPast("?>", "processing instruction"); !s.ok()) return s;
        continue;
      }
      if (StartsWith("<!")) return Error("DTDs and CDATA sections are not accepted");
      element.children.emplace_back();
      if (absl::Status s = Element(element.children.back(), depth + 1); !s.ok()) return s;
    }
  }

  absl::string_view in_;
  const XmlLimits& limits_;
  size_t pos_ = 0;
  int64_t elements_ = 0;
};

}  // namespace

const XmlElement* XmlElement::Child(absl::string_view child_name) const {
  for (const XmlElement& child : children) {
    if (child.name == child_name) return &child;
  }
  return nullptr;
}

std::string XmlElement::ChildText(absl::string_view child_name) const {
  const XmlElement* child = Child(child_name);
  return child == nullptr ? std::string() : child->text;
}

absl::StatusOr<XmlElement> ParseXml(absl::string_view document, const XmlLimits& limits) {
  return Parser(document, limits).Document();
}

}  // namespace weir::fs::s3
