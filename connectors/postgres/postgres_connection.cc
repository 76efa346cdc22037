#include "connectors/postgres/postgres_connection.h"

#include <libpq-fe.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "connectors/system_library.h"

namespace weir::connectors {
namespace {

// libpq, loaded at the first connection (connectors/system_library.h).
#define WEIR_LIBPQ_FUNCTIONS(X) \
  X(PQclear) X(PQconnectdbParams) X(PQdb) X(PQerrorMessage) X(PQescapeLiteral) X(PQexec) \
  X(PQexecParams) X(PQfinish) X(PQfreemem) X(PQgetResult) X(PQgetisnull) X(PQgetlength) \
  X(PQgetvalue) X(PQhost) X(PQnfields) X(PQntuples) X(PQport) X(PQputCopyData) X(PQputCopyEnd) \
  X(PQresultErrorField) X(PQresultErrorMessage) X(PQresultStatus) X(PQsetNoticeProcessor) \
  X(PQstatus)
WEIR_SYSTEM_LIBRARY_TABLE(LibPq, WEIR_LIBPQ_FUNCTIONS);

LazyLibrary<LibPq> libpq(WEIR_LIBPQ_SONAME, WEIR_LIBPQ_PACKAGE, "the PostgreSQL sink", LibPq::Bind);

// After a connection exists, libpq is loaded.
const LibPq& Pq() { return libpq.Get(); }

std::string Trimmed(const char* message) {
  return std::string(absl::StripTrailingAsciiWhitespace(message == nullptr ? "" : message));
}

}  // namespace

absl::Status PostgresConnection::LoadLibrary() { return libpq.Load().status(); }

absl::StatusOr<std::unique_ptr<PostgresConnection>> PostgresConnection::Connect(const std::string& conninfo,
                                                                               const std::string& application_name) {
  // Defaults first: what the connection string says overrides them. TCP
  // keepalives and a user timeout: a peer that vanished (a partition, a
  // dead host) fails the call within about 30 s instead of never.
  const char* keywords[] = {"connect_timeout", "application_name", "keepalives", "keepalives_idle",
                            "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname", nullptr};
  const char* values[] = {"10", application_name.c_str(), "1", "10", "5", "3", "30000", conninfo.c_str(), nullptr};
  RETURN_IF_ERROR(LoadLibrary());
  PGconn* conn = Pq().PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("PostgreSQL: libpq could not allocate a connection");
  if (Pq().PQstatus(conn) != CONNECTION_OK) {
    std::string message = Trimmed(Pq().PQerrorMessage(conn));
    Pq().PQfinish(conn);
    const bool refused = absl::StrContains(message, "password authentication failed") ||
                         absl::StrContains(message, "no password supplied") ||
                         absl::StrContains(message, "no pg_hba.conf entry") ||
                         absl::StrContains(message, "authentication failed");
    if (refused) {
      return absl::UnauthenticatedError(absl::StrCat(
          "PostgreSQL refused the credentials: ", message,
          "; check the user and password of the sink's connection string (or its passfile)"));
    }
    return absl::UnavailableError(absl::StrCat("cannot connect to PostgreSQL: ", message,
                                               "; check that the server runs and the connection string's "
                                               "host, port and dbname"));
  }
  return std::unique_ptr<PostgresConnection>(new PostgresConnection(conn));
}

PostgresConnection::PostgresConnection(pg_conn* conn) : conn_(conn) {
  const char* host = Pq().PQhost(conn_);
  const char* port = Pq().PQport(conn_);
  const char* db = Pq().PQdb(conn_);
  server_ = absl::StrCat(host == nullptr ? "?" : host, ":", port == nullptr ? "?" : port, "/", db == nullptr ? "?" : db);
  // Quiet the server's NOTICEs (e.g. "relation already exists, skipping").
  Pq().PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
}

PostgresConnection::~PostgresConnection() { Pq().PQfinish(conn_); }

bool PostgresConnection::broken() const { return Pq().PQstatus(conn_) != CONNECTION_OK; }

std::string PostgresConnection::Literal(std::string_view text) const {
  char* quoted = Pq().PQescapeLiteral(conn_, text.data(), text.size());
  if (quoted == nullptr) return "''";  // only on out-of-memory or bad encoding
  std::string out(quoted);
  Pq().PQfreemem(quoted);
  return out;
}

absl::Status PostgresConnection::Error(std::string_view what, const pg_result* result) const {
  const char* state = result == nullptr ? nullptr : Pq().PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string message = Trimmed(result == nullptr ? Pq().PQerrorMessage(conn_) : Pq().PQresultErrorMessage(result));
  if (message.empty()) message = Trimmed(Pq().PQerrorMessage(conn_));
  std::string text = absl::StrCat("PostgreSQL ", server_, ": ", std::string(what), " failed: ", message);
  const std::string sqlstate = state == nullptr ? "" : state;
  if (broken() || absl::StartsWith(sqlstate, "08") || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03") {
    return absl::UnavailableError(text);
  }
  if (sqlstate == "42704") return absl::NotFoundError(text);
  // Data exceptions and integrity constraint violations: the rows, not the
  // server, are the problem.
  if (absl::StartsWith(sqlstate, "22") || absl::StartsWith(sqlstate, "23")) {
    return absl::InvalidArgumentError(absl::StrCat(text, " (SQLSTATE ", sqlstate, ")"));
  }
  if (absl::StartsWith(sqlstate, "28")) return absl::UnauthenticatedError(text);
  return absl::FailedPreconditionError(absl::StrCat(text, sqlstate.empty() ? "" : " (SQLSTATE " + sqlstate + ")"));
}

namespace {

// The rows of a finished statement.
PostgresRows RowsOf(const PGresult* result) {
  PostgresRows rows;
  const int n = Pq().PQntuples(result), columns = Pq().PQnfields(result);
  rows.reserve(n);
  for (int r = 0; r < n; ++r) {
    auto& row = rows.emplace_back();
    row.reserve(columns);
    for (int c = 0; c < columns; ++c) {
      if (Pq().PQgetisnull(result, r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(Pq().PQgetvalue(result, r, c), Pq().PQgetlength(result, r, c)));
      }
    }
  }
  return rows;
}

bool Succeeded(const PGresult* result) {
  const ExecStatusType s = Pq().PQresultStatus(result);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK || s == PGRES_EMPTY_QUERY;
}

}  // namespace

absl::StatusOr<PostgresRows> PostgresConnection::Finish(const std::string& statement, pg_result* result) const {
  if (result == nullptr || !Succeeded(result)) {
    absl::Status status = Error(absl::StrCat("'", statement.substr(0, 80), "'"), result);
    Pq().PQclear(result);
    return status;
  }
  PostgresRows rows = RowsOf(result);
  Pq().PQclear(result);
  return rows;
}

absl::StatusOr<PostgresRows> PostgresConnection::Exec(std::string_view sql) {
  const std::string statement(sql);
  return Finish(statement, Pq().PQexec(conn_, statement.c_str()));
}

absl::StatusOr<PostgresRows> PostgresConnection::Exec(std::string_view sql, const std::vector<std::string>& params) {
  const std::string statement(sql);
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  return Finish(statement, Pq().PQexecParams(conn_, statement.c_str(), static_cast<int>(values.size()), nullptr,
                                        values.data(), nullptr, nullptr, 0));
}

absl::Status PostgresConnection::Copy(std::string_view copy_statement, std::string_view data) {
  const std::string statement(copy_statement);
  PGresult* result = Pq().PQexec(conn_, statement.c_str());
  if (result == nullptr || Pq().PQresultStatus(result) != PGRES_COPY_IN) {
    absl::Status status = Error(statement, result);
    Pq().PQclear(result);
    return status;
  }
  Pq().PQclear(result);
  // PQputCopyData blocks until sent on a blocking connection.
  constexpr size_t kPiece = 1 << 20;
  bool sent = true;
  for (size_t at = 0; at < data.size() && sent; at += kPiece) {
    const size_t n = std::min(kPiece, data.size() - at);
    sent = Pq().PQputCopyData(conn_, data.data() + at, static_cast<int>(n)) == 1;
  }
  if (Pq().PQputCopyEnd(conn_, sent ? nullptr : "sending the rows failed") != 1) sent = false;
  absl::Status status;
  while ((result = Pq().PQgetResult(conn_)) != nullptr) {
    if (status.ok() && Pq().PQresultStatus(result) != PGRES_COMMAND_OK) status = Error(statement, result);
    Pq().PQclear(result);
  }
  if (status.ok() && !sent) status = Error(statement, nullptr);
  return status;
}

void AppendCopyText(const std::optional<std::string>& value, std::string& out) {
  if (!value.has_value()) {
    out += "\\N";
    return;
  }
  for (const char c : *value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out.push_back(c);
    }
  }
}

}  // namespace weir::connectors
