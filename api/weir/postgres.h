// The PostgreSQL sink for the DataStream API. The job binary only describes
// it; the TaskManager runs it with libpq. Four strategies
// (docs/exactly-once.md compares them):
//
//   kTwoPhaseCommit  exactly-once. One database transaction per checkpoint
//                    interval and subtask; at the barrier PREPARE
//                    TRANSACTION '<prefix>-<subtask>-<checkpoint>', on
//                    completion COMMIT PREPARED. A prepared transaction
//                    survives the crash of the writer (and of the server),
//                    so recovery commits what the restored checkpoint lists
//                    and rolls back every other prepared transaction of
//                    this prefix. The server needs max_prepared_transactions
//                    above 0.
//   kWriteAhead      rows kept in the checkpoint and written when it
//                    completes (weir/write_ahead.h), in COPYs of
//                    batch_rows: each autocommitted but the last, which
//                    commits with the batch's id in table
//                    weir_sink_batches. A crash between two COPYs of a
//                    batch writes its earlier COPYs twice; a batch of one
//                    COPY is exact.
//   kAtLeastOnce     rows written in autocommitted chunks as they come,
//                    flushed at every barrier; a replay writes them again.
//   kUpsert          idempotent writes by primary key: INSERT ... ON
//                    CONFLICT (key_columns) DO UPDATE, in batches flushed at
//                    every barrier, so a key ends at the last row written
//                    for it. A replay after a failure writes the keys again:
//                    during recovery a key can step back to the value it had
//                    at the restored checkpoint and then move forward again;
//                    the final state is exact when the rows are
//                    deterministic (a checkpointed keyed count, say). Needs a
//                    primary key or unique constraint on key_columns. Not
//                    for append-only tables: rows of one key replace each
//                    other.
//
//   postgres::Sink(rows, {.conninfo = "host=db dbname=app user=weir",
//                         .table = "counts", .columns = {"key", "count"}});
//
// Rows go in with COPY, batch_rows at a time (kUpsert: COPY into a
// temporary table, then one INSERT ... SELECT ... ON CONFLICT).
//
//   postgres::Sink(counts, {.conninfo = "host=db dbname=app user=weir",
//                           .table = "counts", .columns = {"key", "count"},
//                           .create_table = "key text PRIMARY KEY, count bigint",
//                           .strategy = postgres::Strategy::kUpsert,
//                           .key_columns = {"key"}});
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weir/datastream.h"
#include "weir/serializer.h"

namespace weir::postgres {

// One row: a value per column of SinkOptions::columns, in order, as text in
// PostgreSQL's input syntax ("42", "2026-12-01 10:00:00+00"); nullopt is
// NULL.
struct Row {
  std::vector<std::optional<std::string>> values;

  bool operator==(const Row&) const = default;
};

enum class Strategy { kAtLeastOnce, kTwoPhaseCommit, kWriteAhead, kUpsert };

inline const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kAtLeastOnce: return "at-least-once";
    case Strategy::kTwoPhaseCommit: return "two-phase-commit";
    case Strategy::kWriteAhead: return "write-ahead";
    case Strategy::kUpsert: return "upsert";
  }
  return "?";
}

struct SinkOptions {
  // A libpq connection string ("host=... port=... dbname=... user=...") or
  // URI. Sent to the TaskManagers in the job's description: prefer a
  // password file (passfile=) on the TaskManager hosts to a password here.
  std::string conninfo;
  // [schema.]table; letters, digits and '_' (unquoted SQL identifiers).
  std::string table;
  // The columns a Row fills, in order.
  std::vector<std::string> columns;
  // When set, the table is created if missing with these column
  // definitions, e.g. "key text, count bigint".
  std::string create_table;
  Strategy strategy = Strategy::kTwoPhaseCommit;
  // Names the sink's prepared transactions ("<prefix>-<subtask>-<checkpoint>")
  // and its rows of weir_sink_batches. Keep it stable across restarts
  // and resubmissions of the job and unique among the sinks writing to the
  // database server (transaction names are shared by its databases).
  // Default: "weir-<sink name>-<table>", characters other than letters,
  // digits, '.', '_' and '-' replaced by '_' (past 150 characters: cut, with
  // a hash of the whole).
  std::string transaction_prefix;
  // Rows per COPY (kUpsert: distinct keys per batch; a key written twice
  // in a batch is sent once, with its last row).
  int batch_rows = 1000;
  // kUpsert only, and required there: the columns of the table's primary
  // key (or of a unique constraint), a subset of columns. A row's values in
  // the other columns replace those of the row with the same key; when
  // every column is a key column, a row already there is left alone.
  std::vector<std::string> key_columns;
};

inline SinkHandle Sink(const DataStream<Row>& stream, const SinkOptions& options, std::string name = "PostgresSink");

}  // namespace weir::postgres

namespace weir {

template <>
struct Serializer<postgres::Row> {
  static void Write(const postgres::Row& row, std::string& out) {
    internal::WriteVarint(row.values.size(), out);
    for (const std::optional<std::string>& v : row.values) {
      out.push_back(v.has_value() ? 1 : 0);
      if (v.has_value()) internal::WriteField(*v, out);
    }
  }
  static postgres::Row Read(std::string_view in) {
    postgres::Row row;
    size_t pos = 0;
    const uint64_t n = internal::ReadVarint(in, &pos);
    if (n > in.size()) throw std::runtime_error("corrupt PostgreSQL row: too many values");
    row.values.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (pos >= in.size()) throw std::runtime_error("corrupt PostgreSQL row: truncated");
      if (in[pos++] == 1) {
        row.values.emplace_back(std::string(internal::ReadField(in, &pos)));
      } else {
        row.values.emplace_back(std::nullopt);
      }
    }
    return row;
  }
};

namespace postgres {

inline SinkHandle Sink(const DataStream<Row>& stream, const SinkOptions& options, std::string name) {
  if (options.conninfo.empty()) throw std::invalid_argument("postgres::Sink: conninfo is empty");
  if (options.table.empty()) throw std::invalid_argument("postgres::Sink: no table");
  if (options.columns.empty()) throw std::invalid_argument("postgres::Sink: no columns");
  if (options.strategy == Strategy::kUpsert && options.key_columns.empty()) {
    throw std::invalid_argument("postgres::Sink: Strategy::kUpsert needs key_columns (the table's primary key)");
  }
  if (options.strategy != Strategy::kUpsert && !options.key_columns.empty()) {
    throw std::invalid_argument("postgres::Sink: key_columns is for Strategy::kUpsert only");
  }
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSink;
  spec.connector = "postgres-sink";
  std::string columns;
  for (const std::string& c : options.columns) columns += (columns.empty() ? "" : ",") + c;
  std::string key_columns;
  for (const std::string& c : options.key_columns) key_columns += (key_columns.empty() ? "" : ",") + c;
  std::string prefix = options.transaction_prefix;
  if (prefix.empty()) {
    prefix = weir::internal::LegalName("weir-" + spec.name + "-" + options.table);
    if (prefix.size() > 150) {
      // Too long for a transaction name: a stable cut plus a hash (FNV-1a)
      // of the whole.
      uint64_t hash = 14695981039346656037ull;
      for (unsigned char c : prefix) hash = (hash ^ c) * 1099511628211ull;
      static constexpr char kHex[] = "0123456789abcdef";
      std::string tail;
      for (int i = 0; i < 16; ++i, hash >>= 4) tail.push_back(kHex[hash & 0xf]);
      prefix = prefix.substr(0, 133) + "-" + tail;
    }
  }
  spec.properties = {{"conninfo", options.conninfo},
                     {"table", options.table},
                     {"columns", columns},
                     {"strategy", StrategyName(options.strategy)},
                     {"transaction.prefix", prefix},
                     {"batch.rows", std::to_string(options.batch_rows)},
                     // The JobManager's checks read this: the two strategies
                     // that write when checkpoints complete need them.
                     // Upserts write as rows come (at-least-once, like the
                     // Redis sink): exactness comes from the job's state.
                     {"guarantee", options.strategy == Strategy::kAtLeastOnce || options.strategy == Strategy::kUpsert
                                       ? "at-least-once"
                                       : "exactly-once"}};
  if (!options.create_table.empty()) spec.properties["create.table"] = options.create_table;
  if (!key_columns.empty()) spec.properties["key.columns"] = key_columns;
  return SinkHandle(stream.env(), stream.Attach(std::move(spec)));
}

}  // namespace postgres
}  // namespace weir
