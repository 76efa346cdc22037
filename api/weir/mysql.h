// The MySQL / MariaDB sink for the DataStream API: idempotent writes by
// primary key. The job binary only describes it; the TaskManager runs it
// with libmariadb (MariaDB Connector/C, which speaks to MySQL too).
//
//   mysql::Sink(rows, {.host = "db", .user = "weir", .password_file = "/etc/weir/mysql-password",
//                      .database = "app", .table = "counts", .columns = {"word", "count"},
//                      .key_columns = {"word"}});
//
// Rows go in batches of batch_rows as INSERT ... ON DUPLICATE KEY UPDATE c
// = VALUES(c) for every column but the key's, each batch one transaction,
// flushed at every checkpoint barrier, at the end of input and whenever the
// task's input runs dry. A key ends at the last row written for it.
//
// What that promises (docs/exactly-once.md, "Idempotent writes"): the sink
// is at-least-once, and because writing a key's row again with the same
// values changes nothing, a job whose rows come from checkpointed state ends
// with every key exactly right. During recovery a key can step back to the
// value it had at the restored checkpoint and then move forward again.
// Needs a primary key (or unique key) on exactly key_columns; the sink
// checks at start. Not for append-only tables.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "weir/datastream.h"
#include "weir/postgres.h"

namespace weir::mysql {

// One row, as for the PostgreSQL sink: a value per column of
// SinkOptions::columns, in order, as text the server converts to the
// column's type ("42", "2026-12-01 10:00:00"); nullopt is NULL.
using Row = postgres::Row;

struct SinkOptions {
  std::string host;
  int port = 3306;
  std::string user;
  // The password, read on the TaskManager hosts when the sink connects:
  // the first line of this file, or the value of this environment variable
  // of the TaskManager process. At most one; neither means no password.
  // The job's description (which TaskManagers receive) holds only the
  // file's path or the variable's name.
  std::string password_file;
  std::string password_env;
  std::string database;
  // The table; letters, digits and '_' (at most 64).
  std::string table;
  // The columns a Row fills, in order.
  std::vector<std::string> columns;
  // Required: the columns of the table's primary key (or of a unique key),
  // a subset of columns. When every column is a key column, a row already
  // there is left alone.
  std::vector<std::string> key_columns;
  // When set, the table is created if missing with these definitions, e.g.
  // "word VARCHAR(64) PRIMARY KEY, count BIGINT".
  std::string create_table;
  // Rows per batch (one transaction), 1 to 1000000.
  int batch_rows = 1000;
};

inline SinkHandle Sink(const DataStream<Row>& stream, const SinkOptions& options, std::string name = "MySqlSink") {
  if (options.host.empty()) throw std::invalid_argument("mysql::Sink: no host");
  if (options.database.empty()) throw std::invalid_argument("mysql::Sink: no database");
  if (options.table.empty()) throw std::invalid_argument("mysql::Sink: no table");
  if (options.columns.empty()) throw std::invalid_argument("mysql::Sink: no columns");
  if (options.key_columns.empty()) throw std::invalid_argument("mysql::Sink: no key_columns (the table's primary key)");
  if (!options.password_file.empty() && !options.password_env.empty()) {
    throw std::invalid_argument("mysql::Sink: set password_file or password_env, not both");
  }
  auto joined = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
    return out;
  };
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSink;
  spec.connector = "mysql-sink";
  spec.properties = {{"host", options.host},
                     {"port", std::to_string(options.port)},
                     {"user", options.user},
                     {"database", options.database},
                     {"table", options.table},
                     {"columns", joined(options.columns)},
                     {"key.columns", joined(options.key_columns)},
                     {"batch.rows", std::to_string(options.batch_rows)},
                     // Writes as rows come: exactness comes from the job's
                     // state (like the Redis sink).
                     {"guarantee", "at-least-once"}};
  if (!options.password_file.empty()) spec.properties["password.file"] = options.password_file;
  if (!options.password_env.empty()) spec.properties["password.env"] = options.password_env;
  if (!options.create_table.empty()) spec.properties["create.table"] = options.create_table;
  return SinkHandle(stream.env(), stream.Attach(std::move(spec)));
}

}  // namespace weir::mysql
