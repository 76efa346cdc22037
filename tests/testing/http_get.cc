#include "tests/testing/http_get.h"

#include "httplib.h"

namespace weir::testing {

HttpResult HttpGet(int port, const std::string& path, const std::string& token) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result result = client.Get(path.c_str(), headers);
  if (!result) return HttpResult{};
  return HttpResult{.status = result->status,
                    .body = result->body,
                    .content_type = result->get_header_value("Content-Type")};
}

}  // namespace weir::testing
