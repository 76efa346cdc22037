// PostgresConnection: one libpq connection, with errors as absl::Status.
//
// Codes: kUnavailable when the server cannot be reached or the connection
// broke (retry after reconnecting), kUnauthenticated when it refused the
// credentials, kNotFound for SQLSTATE 42704 (e.g. COMMIT PREPARED of a
// transaction that does not exist), kInvalidArgument for data the server
// refuses (SQLSTATE classes 22 and 23: bad values, constraint violations),
// kFailedPrecondition for anything else the server refused. Messages say what was attempted on which server
// ("host:port/database") and the server's own words; they never contain the
// connection string (it may hold a password).
//
// Thread-safety: none; one thread uses a connection at a time.
#ifndef WEIR_CONNECTORS_POSTGRES_POSTGRES_CONNECTION_H_
#define WEIR_CONNECTORS_POSTGRES_POSTGRES_CONNECTION_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct pg_conn;
struct pg_result;

namespace weir::connectors {

// The rows a statement returned, as text (nullopt for NULL).
using PostgresRows = std::vector<std::vector<std::optional<std::string>>>;

class PostgresConnection {
 public:
  // Loads libpq unless loaded (connectors/system_library.h): kFailedPrecondition
  // naming the package when it is missing. Connect calls it.
  static absl::Status LoadLibrary();

  // Connects (connect_timeout 10 s unless `conninfo` sets one);
  // `application_name` shows in pg_stat_activity.
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Connect(const std::string& conninfo,
                                                                     const std::string& application_name);
  ~PostgresConnection();

  PostgresConnection(const PostgresConnection&) = delete;
  PostgresConnection& operator=(const PostgresConnection&) = delete;

  // Runs `sql` (one or more statements without parameters).
  absl::StatusOr<PostgresRows> Exec(std::string_view sql);
  // Runs one statement with text parameters $1, $2, ...
  absl::StatusOr<PostgresRows> Exec(std::string_view sql, const std::vector<std::string>& params);
  // COPY ... FROM STDIN with `data` in COPY's text format.
  absl::Status Copy(std::string_view copy_statement, std::string_view data);

  // `text` as a quoted SQL string literal.
  std::string Literal(std::string_view text) const;
  // The connection is gone (reconnect before using it again).
  bool broken() const;
  // "host:port/database".
  const std::string& server() const { return server_; }

 private:
  explicit PostgresConnection(pg_conn* conn);
  // The rows of `statement`'s `result`, or its error; clears `result`.
  absl::StatusOr<PostgresRows> Finish(const std::string& statement, pg_result* result) const;
  // The status for a failed call: `what` failed, with the server's message.
  absl::Status Error(std::string_view what, const pg_result* result) const;

  pg_conn* conn_;
  std::string server_;
};

// Appends `value` to `out` in COPY's text format (escaping backslash, tab,
// newline and carriage return); nullopt is \N.
void AppendCopyText(const std::optional<std::string>& value, std::string& out);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_POSTGRES_POSTGRES_CONNECTION_H_
