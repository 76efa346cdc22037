#include "connectors/mysql/mysql_connection.h"

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "connectors/system_library.h"

namespace weir::connectors {
namespace {

// libmariadb, loaded at the first connection (connectors/system_library.h).
#define WEIR_LIBMARIADB_FUNCTIONS(X) \
  X(mysql_server_init) X(mysql_init) X(mysql_options) X(mysql_real_connect) X(mysql_close) X(mysql_errno) \
  X(mysql_error) X(mysql_real_query) X(mysql_store_result) X(mysql_free_result) X(mysql_num_fields) \
  X(mysql_fetch_row) X(mysql_fetch_lengths) X(mysql_field_count) X(mysql_real_escape_string)
WEIR_SYSTEM_LIBRARY_TABLE(LibMariaDb, WEIR_LIBMARIADB_FUNCTIONS);

LazyLibrary<LibMariaDb> libmariadb(WEIR_LIBMARIADB_SONAME, WEIR_LIBMARIADB_PACKAGE, "the MySQL sink",
                                   LibMariaDb::Bind);

// After a connection exists, libmariadb is loaded.
const LibMariaDb& My() { return libmariadb.Get(); }

// mysql_init initializes the library on first use, which is not
// thread-safe: once, here, before any connection.
std::once_flag library_initialized;

bool ConnectionLost(unsigned int code) {
  return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == CR_CONN_HOST_ERROR ||
         code == CR_CONNECTION_ERROR || code == CR_SERVER_LOST_EXTENDED || code == CR_UNKNOWN_HOST ||
         code == CR_COMMANDS_OUT_OF_SYNC || code == ER_CONNECTION_KILLED || code == ER_SERVER_SHUTDOWN ||
         code == ER_QUERY_INTERRUPTED || code == ER_NET_READ_ERROR || code == ER_NET_READ_INTERRUPTED ||
         code == ER_NET_WRITE_INTERRUPTED || code == ER_NET_ERROR_ON_WRITE;
}

bool BadData(unsigned int code) {
  switch (code) {
    case ER_BAD_NULL_ERROR:
    case ER_DATA_TOO_LONG:
    case ER_WARN_DATA_OUT_OF_RANGE:
    case ER_TRUNCATED_WRONG_VALUE:
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD:
    case ER_WRONG_VALUE_COUNT_ON_ROW:
    case ER_DUP_ENTRY:
    case ER_NO_REFERENCED_ROW_2:
    case ER_ROW_IS_REFERENCED_2:
    case ER_INVALID_CHARACTER_STRING:
    case ER_CANNOT_CONVERT_CHARACTER:
    case ER_DIVISION_BY_ZERO:
    case ER_WARN_NULL_TO_NOTNULL:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status MySqlConnection::LoadLibrary() {
  RETURN_IF_ERROR(libmariadb.Load().status());
  std::call_once(library_initialized, [] { My().mysql_server_init(0, nullptr, nullptr); });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MySqlConnection>> MySqlConnection::Connect(const MySqlEndpoint& endpoint) {
  RETURN_IF_ERROR(LoadLibrary());
  const std::string server = absl::StrCat(endpoint.host, ":", endpoint.port, "/", endpoint.database);
  MYSQL* conn = My().mysql_init(nullptr);
  if (conn == nullptr) return absl::ResourceExhaustedError("MySQL: libmariadb could not allocate a connection");
  const unsigned int connect_timeout = 10, io_timeout = 60;
  const unsigned int tcp = MYSQL_PROTOCOL_TCP;
  My().mysql_options(conn, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
  My().mysql_options(conn, MYSQL_OPT_READ_TIMEOUT, &io_timeout);
  My().mysql_options(conn, MYSQL_OPT_WRITE_TIMEOUT, &io_timeout);
  My().mysql_options(conn, MYSQL_OPT_PROTOCOL, &tcp);
  My().mysql_options(conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  // No option files: what the job says is what counts.
  if (My().mysql_real_connect(conn, endpoint.host.c_str(), endpoint.user.c_str(),
                              endpoint.password.empty() ? nullptr : endpoint.password.c_str(),
                              endpoint.database.c_str(), static_cast<unsigned int>(endpoint.port), nullptr,
                              0) == nullptr) {
    const unsigned int code = My().mysql_errno(conn);
    std::string message = My().mysql_error(conn);
    My().mysql_close(conn);
    if (code == ER_ACCESS_DENIED_ERROR || code == ER_DBACCESS_DENIED_ERROR || code == ER_ACCESS_DENIED_NO_PASSWORD_ERROR) {
      return absl::UnauthenticatedError(absl::StrCat("MySQL ", server, " refused the credentials: ", message,
                                                     "; check the sink's user and its password file or variable"));
    }
    if (code == ER_BAD_DB_ERROR) {
      return absl::FailedPreconditionError(
          absl::StrCat("MySQL ", server, ": ", message, "; create the database or fix SinkOptions::database"));
    }
    return absl::UnavailableError(absl::StrCat("cannot connect to MySQL ", server, ": ", message,
                                               " (error ", code, "); check that the server runs and the sink's host "
                                               "and port"));
  }
  return std::unique_ptr<MySqlConnection>(new MySqlConnection(conn, server));
}

MySqlConnection::~MySqlConnection() { My().mysql_close(conn_); }

absl::Status MySqlConnection::Error(std::string_view what) {
  const unsigned int code = My().mysql_errno(conn_);
  const std::string text =
      absl::StrCat("MySQL ", server_, ": ", std::string(what), " failed: ", My().mysql_error(conn_), " (error ", code, ")");
  if (ConnectionLost(code)) {
    broken_ = true;
    return absl::UnavailableError(text);
  }
  if (code == ER_LOCK_DEADLOCK || code == ER_LOCK_WAIT_TIMEOUT) return absl::AbortedError(text);
  if (BadData(code)) return absl::InvalidArgumentError(text);
  if (code == ER_ACCESS_DENIED_ERROR || code == ER_TABLEACCESS_DENIED_ERROR || code == ER_DBACCESS_DENIED_ERROR) {
    return absl::PermissionDeniedError(text);
  }
  return absl::FailedPreconditionError(text);
}

absl::StatusOr<MySqlRows> MySqlConnection::Exec(std::string_view sql) {
  if (My().mysql_real_query(conn_, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
    return Error(absl::StrCat("'", std::string(sql.substr(0, 80)), "'"));
  }
  MySqlRows rows;
  MYSQL_RES* result = My().mysql_store_result(conn_);
  if (result == nullptr) {
    if (My().mysql_field_count(conn_) != 0) return Error(absl::StrCat("reading the rows of '", std::string(sql.substr(0, 80)), "'"));
    return rows;  // a statement without rows
  }
  const unsigned int fields = My().mysql_num_fields(result);
  while (MYSQL_ROW row = My().mysql_fetch_row(result)) {
    const unsigned long* lengths = My().mysql_fetch_lengths(result);
    auto& out = rows.emplace_back();
    out.reserve(fields);
    for (unsigned int i = 0; i < fields; ++i) {
      if (row[i] == nullptr) {
        out.emplace_back(std::nullopt);
      } else {
        out.emplace_back(std::string(row[i], lengths[i]));
      }
    }
  }
  My().mysql_free_result(result);
  return rows;
}

void MySqlConnection::AppendLiteral(std::string_view value, std::string& out) const {
  // mysql_real_escape_string writes at most 2 * length + 1 bytes; it
  // escapes by the connection's character set, and doubles quotes instead
  // of using backslashes under NO_BACKSLASH_ESCAPES.
  const size_t at = out.size();
  out.resize(at + 1 + 2 * value.size() + 1);
  out[at] = '\'';
  const unsigned long n =
      My().mysql_real_escape_string(conn_, out.data() + at + 1, value.data(), static_cast<unsigned long>(value.size()));
  out.resize(at + 1 + n);
  out.push_back('\'');
}

}  // namespace weir::connectors
