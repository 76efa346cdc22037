// HttpGet: a plain HTTP GET against a daemon's endpoint on 127.0.0.1, for
// tests (health probes, /metrics, the REST API).
#pragma once

#include <string>

namespace weir::testing {

struct HttpResult {
  // 0 when no response came (connection refused, timeout).
  int status = 0;
  std::string body;
  std::string content_type;
};

// `token` non-empty: sent as "Authorization: Bearer <token>".
HttpResult HttpGet(int port, const std::string& path, const std::string& token = "");

}  // namespace weir::testing
