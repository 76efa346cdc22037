// MySqlConnection: one libmariadb connection (MariaDB Connector/C, which
// speaks to MariaDB and MySQL servers alike), with errors as absl::Status.
//
// Codes: kUnavailable when the server cannot be reached or the connection
// broke (retry after reconnecting), kUnauthenticated when it refused the
// credentials, kAborted for a deadlock or a lock wait timeout (the
// transaction was rolled back; run it again), kInvalidArgument for data
// the server refuses (bad values, NULL in a NOT NULL column, values too
// long), kFailedPrecondition for anything else the server refused.
// Messages say what was attempted on which server ("host:port/database")
// and the server's own words; they never contain the password.
//
// Thread-safety: none; one thread uses a connection at a time.
#ifndef WEIR_CONNECTORS_MYSQL_MYSQL_CONNECTION_H_
#define WEIR_CONNECTORS_MYSQL_MYSQL_CONNECTION_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct st_mysql;

namespace weir::connectors {

// The rows a statement returned, as text (nullopt for NULL).
using MySqlRows = std::vector<std::vector<std::optional<std::string>>>;

struct MySqlEndpoint {
  std::string host;
  int port = 3306;
  std::string user;
  std::string password;
  std::string database;
};

class MySqlConnection {
 public:
  // Loads libmariadb unless loaded (connectors/system_library.h):
  // kFailedPrecondition naming the package when it is missing. Connect
  // calls it.
  static absl::Status LoadLibrary();

  // Connects over TCP with utf8mb4, autocommit on, a 10 s connect timeout
  // and 60 s read and write timeouts (a vanished peer fails the call
  // instead of hanging it).
  static absl::StatusOr<std::unique_ptr<MySqlConnection>> Connect(const MySqlEndpoint& endpoint);
  ~MySqlConnection();

  MySqlConnection(const MySqlConnection&) = delete;
  MySqlConnection& operator=(const MySqlConnection&) = delete;

  // Runs one statement; its rows, if it returns any.
  absl::StatusOr<MySqlRows> Exec(std::string_view sql);
  // Appends `value` to `out` as a quoted string literal, escaped by the
  // connection's character set and SQL mode.
  void AppendLiteral(std::string_view value, std::string& out) const;
  // The connection is gone (reconnect before using it again).
  bool broken() const { return broken_; }
  // "host:port/database".
  const std::string& server() const { return server_; }

 private:
  MySqlConnection(st_mysql* conn, std::string server) : conn_(conn), server_(std::move(server)) {}
  absl::Status Error(std::string_view what);

  st_mysql* conn_;
  std::string server_;
  bool broken_ = false;
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_MYSQL_MYSQL_CONNECTION_H_
