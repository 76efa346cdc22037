#include "connectors/mysql/mysql_sink.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"
#include "connectors/reconnect.h"
#include "connectors/system_library.h"

namespace weir::connectors {
namespace {

// A statement's SQL past which the batch goes on in the next statement
// (servers take 16 MiB by default: max_allowed_packet).
constexpr size_t kStatementBytes = 1 << 20;

bool IsIdentifier(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (!(absl::ascii_isalpha(name[0]) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

absl::Status BadProperty(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(kMySqlSinkConnector, ": property '", key, "' is '", value, "'; expected ", expected));
}

absl::Status Missing(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(kMySqlSinkConnector, ": property '", key, "' is missing; set ", what));
}

// A checked identifier in backticks.
std::string Quoted(absl::string_view name) { return absl::StrCat("`", name, "`"); }

std::string QuotedList(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back(Quoted(n));
  return absl::StrJoin(quoted, ", ");
}

// Column names compare without case in MySQL.
bool SameColumn(absl::string_view a, absl::string_view b) { return absl::AsciiStrToLower(a) == absl::AsciiStrToLower(b); }

bool IsKey(const MySqlSinkConfig& config, const std::string& column) {
  return std::any_of(config.key_columns.begin(), config.key_columns.end(),
                     [&](const std::string& k) { return SameColumn(k, column); });
}

absl::StatusOr<std::vector<std::string>> Names(const Properties& properties, const std::string& key) {
  const std::string value = PropertyOr(properties, key);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (absl::string_view n : absl::StrSplit(value, ',')) {
    if (!IsIdentifier(n)) {
      return BadProperty(key, value, "comma-separated names of letters, digits and '_' (at most 64 each)");
    }
    if (!seen.insert(absl::AsciiStrToLower(n)).second) return BadProperty(key, value, "each column once");
    names.emplace_back(n);
  }
  return names;
}

}  // namespace

absl::StatusOr<MySqlSinkConfig> MySqlSinkConfig::FromProperties(const Properties& properties) {
  MySqlSinkConfig config;
  config.host = PropertyOr(properties, "host");
  if (config.host.empty()) return Missing("host", "SinkOptions::host to the server's host name or address");
  if (config.host.find_first_of(" \t\n/") != std::string::npos) {
    return BadProperty("host", config.host, "a host name or address");
  }
  const std::string port = PropertyOr(properties, "port");
  if (!absl::SimpleAtoi(port, &config.port) || config.port < 1 || config.port > 65535) {
    return BadProperty("port", port, "a TCP port, 1 to 65535");
  }
  config.user = PropertyOr(properties, "user");
  config.password_file = PropertyOr(properties, "password.file");
  config.password_env = PropertyOr(properties, "password.env");
  if (!config.password_file.empty() && !config.password_env.empty()) {
    return BadProperty("password.env", config.password_env,
                       "nothing when 'password.file' is set (SinkOptions: password_file or password_env, not both)");
  }
  config.database = PropertyOr(properties, "database");
  if (config.database.empty()) return Missing("database", "SinkOptions::database");
  if (!IsIdentifier(config.database)) {
    return BadProperty("database", config.database, "a name of letters, digits and '_' (at most 64)");
  }
  config.table = PropertyOr(properties, "table");
  if (!IsIdentifier(config.table)) {
    return BadProperty("table", config.table, "a table name of letters, digits and '_' (at most 64)");
  }
  ASSIGN_OR_RETURN(config.columns, Names(properties, "columns"));
  if (config.columns.size() > 4096) return BadProperty("columns", "...", "at most 4096 columns");
  const std::string keys = PropertyOr(properties, "key.columns");
  if (keys.empty()) {
    return Missing("key.columns", "SinkOptions::key_columns to the columns of the table's primary key");
  }
  ASSIGN_OR_RETURN(config.key_columns, Names(properties, "key.columns"));
  for (const std::string& k : config.key_columns) {
    if (std::none_of(config.columns.begin(), config.columns.end(),
                     [&](const std::string& c) { return SameColumn(c, k); })) {
      return BadProperty("key.columns", keys,
                         absl::StrCat("columns among 'columns' (", PropertyOr(properties, "columns"), "); '", k,
                                      "' is not one of them"));
    }
  }
  config.create_table = PropertyOr(properties, "create.table");
  if (config.create_table.find(';') != std::string::npos) {
    return BadProperty("create.table", config.create_table,
                       "column definitions such as 'word VARCHAR(64) PRIMARY KEY, count BIGINT', without ';'");
  }
  const std::string batch = PropertyOr(properties, "batch.rows");
  if (!absl::SimpleAtoi(batch, &config.batch_rows) || config.batch_rows < 1 || config.batch_rows > 1000000) {
    return BadProperty("batch.rows", batch, "rows per batch, 1 to 1000000");
  }
  const std::string guarantee = PropertyOr(properties, kGuaranteeProperty);
  if (guarantee != kAtLeastOnce) {
    return BadProperty(kGuaranteeProperty, guarantee,
                       "'at-least-once' (the sink's writes are idempotent; exactness comes from the job's state)");
  }
  return config;
}

absl::StatusOr<std::string> MySqlSinkConfig::ReadPassword() const {
  if (!password_env.empty()) {
    const char* value = std::getenv(password_env.c_str());
    if (value == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "environment variable ", password_env, " (SinkOptions::password_env) is not set on this TaskManager"));
    }
    return std::string(value);
  }
  if (password_file.empty()) return std::string();
  std::ifstream in(password_file);
  std::string line;
  if (!in.is_open() || (!std::getline(in, line) && !in.eof())) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read password file ", password_file,
                                                      " (SinkOptions::password_file) on this TaskManager"));
  }
  return std::string(absl::StripTrailingAsciiWhitespace(line));
}

MySqlUpsertStatements::MySqlUpsertStatements(const MySqlSinkConfig& config) {
  insert_head = absl::StrCat("INSERT INTO ", Quoted(config.table), " (", QuotedList(config.columns), ") VALUES ");
  std::vector<std::string> updates;
  for (const std::string& c : config.columns) {
    if (!IsKey(config, c)) updates.push_back(absl::StrCat(Quoted(c), " = VALUES(", Quoted(c), ")"));
  }
  if (updates.empty()) {
    // Every column a key: the row there stays as it is.
    updates.push_back(absl::StrCat(Quoted(config.key_columns[0]), " = ", Quoted(config.key_columns[0])));
  }
  on_duplicate = absl::StrCat(" ON DUPLICATE KEY UPDATE ", absl::StrJoin(updates, ", "));
  if (!config.create_table.empty()) {
    create_table = absl::StrCat("CREATE TABLE IF NOT EXISTS ", Quoted(config.table), " (", config.create_table, ")");
  }
}

MySqlUpsertSink::MySqlUpsertSink(MySqlSinkConfig config) : config_(std::move(config)), statements_(config_) {}

void MySqlUpsertSink::Throw(const absl::Status& status) const {
  if (absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status)) {
    // The same rows come again after a restart: fail the job instead.
    throw UnrecoverableError(absl::StrCat(client_, ": ", status.message(),
                                          absl::IsInvalidArgument(status)
                                              ? "; the table refuses rows the job writes (a restart would write them "
                                                "again); fix the job's rows or the table's definition"
                                              : "; grant the sink's user what it needs"));
  }
  throw std::runtime_error(absl::StrCat(client_, ": ", status.message()));
}

void MySqlUpsertSink::Connect(bool retry) {
  const retry::RetryOutcome outcome = retry::Retry(
      ReconnectPolicy(kMySqlReconnectTimeout),
      [&] {
        ThrowUnlessLoaded(MySqlConnection::LoadLibrary(), client_);
        absl::StatusOr<std::unique_ptr<MySqlConnection>> c = MySqlConnection::Connect(
            {.host = config_.host, .port = config_.port, .user = config_.user, .password = password_,
             .database = config_.database});
        if (c.ok()) connection_ = *std::move(c);
        return c.status();
      },
      // Refused credentials and missing databases do not get better by
      // waiting.
      [&](const absl::Status& s) { return retry && absl::IsUnavailable(s); });
  if (outcome.status.ok()) return;
  if (retry) {
    Throw(absl::Status(outcome.status.code(),
                       absl::StrCat(outcome.status.message(), " (tried for ",
                                    absl::FormatDuration(kMySqlReconnectTimeout), ": ", outcome.Summary(), ")")));
  }
  Throw(outcome.status);
}

void MySqlUpsertSink::Open(OperatorContext& context, RecordOutput*) {
  client_ = absl::StrCat("MySqlSink '", context.operator_name(), "' subtask ", context.subtask_index(), "/",
                         context.parallelism());
  absl::StatusOr<std::string> password = config_.ReadPassword();
  if (!password.ok()) throw UnrecoverableError(absl::StrCat(client_, ": ", password.status().message()));
  password_ = *std::move(password);
  Connect(/*retry=*/false);
  if (!statements_.create_table.empty()) {
    absl::StatusOr<MySqlRows> created = connection_->Exec(statements_.create_table);
    if (!created.ok()) Throw(created.status());
  }
  CheckKey();
  const MetricLabels table = {{"table", config_.table}};
  rows_metric_ = &context.metrics().counter("weir_mysql_upserted_rows_total", "Rows the MySQL sink sent.", table);
  batches_metric_ =
      &context.metrics().counter("weir_mysql_upsert_batches_total", "Batches the MySQL sink committed.", table);
  logging::Get("mysql")->info("{}: upserting into {} on MySQL {}, key ({})", client_, config_.table,
                              connection_->server(), absl::StrJoin(config_.key_columns, ", "));
}

void MySqlUpsertSink::CheckKey() {
  std::string sql =
      "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ',') FROM "
      "information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND NON_UNIQUE = 0 AND TABLE_NAME = ";
  connection_->AppendLiteral(config_.table, sql);
  sql += " GROUP BY INDEX_NAME";
  absl::StatusOr<MySqlRows> keys = connection_->Exec(sql);
  if (!keys.ok()) Throw(keys.status());
  std::set<std::string> wanted;
  for (const std::string& k : config_.key_columns) wanted.insert(absl::AsciiStrToLower(k));
  std::vector<std::string> others;
  bool found = false;
  for (const auto& row : *keys) {
    if (row.size() < 2 || !row[1].has_value()) continue;
    std::set<std::string> columns;
    for (absl::string_view c : absl::StrSplit(*row[1], ',')) columns.insert(absl::AsciiStrToLower(c));
    if (columns == wanted) {
      found = true;
    } else {
      others.push_back(absl::StrCat(row[0].value_or("?"), " (", *row[1], ")"));
    }
  }
  if (!found) {
    // Without it ON DUPLICATE KEY UPDATE appends: the replay after a
    // failure would add rows.
    throw UnrecoverableError(absl::StrCat(
        client_, ": table ", config_.table, " on MySQL ", connection_->server(),
        " has no primary key or unique key on exactly (", absl::StrJoin(config_.key_columns, ", "),
        "), which the upsert needs", keys->empty() ? " (it has no unique key at all, or does not exist)" : "",
        "; add one (ALTER TABLE ", config_.table, " ADD PRIMARY KEY (", absl::StrJoin(config_.key_columns, ", "),
        "), or PRIMARY KEY in SinkOptions::create_table) or make key_columns name the table's key"));
  }
  if (!others.empty()) {
    logging::Get("mysql")->warn(
        "{}: table {} has unique keys besides ({}): {}; a row that collides on one of them updates that row "
        "instead",
        client_, config_.table, absl::StrJoin(config_.key_columns, ", "), absl::StrJoin(others, ", "));
  }
}

void MySqlUpsertSink::Process(void* record) {
  const mysql::Row& row = *static_cast<const mysql::Row*>(record);
  if (row.values.size() != config_.columns.size()) {
    throw UnrecoverableError(absl::StrCat(client_, ": a row has ", row.values.size(), " values, but the sink writes ",
                                          config_.columns.size(), " columns (", absl::StrJoin(config_.columns, ", "),
                                          "); make the job's rows match SinkOptions::columns"));
  }
  pending_.push_back(row);
  if (pending_.size() >= static_cast<size_t>(config_.batch_rows)) Flush();
}

absl::Status MySqlUpsertSink::SendBatch() {
  auto fail = [&](const absl::Status& status) {
    if (!connection_->broken()) (void)connection_->Exec("ROLLBACK");
    return status;
  };
  absl::StatusOr<MySqlRows> begun = connection_->Exec("START TRANSACTION");
  if (!begun.ok()) return fail(begun.status());
  size_t i = 0;
  while (i < pending_.size()) {
    sql_ = statements_.insert_head;
    for (bool first = true; i < pending_.size() && (first || sql_.size() < kStatementBytes); ++i, first = false) {
      if (!first) sql_ += ", ";
      sql_ += '(';
      const mysql::Row& row = pending_[i];
      for (size_t c = 0; c < row.values.size(); ++c) {
        if (c > 0) sql_ += ", ";
        if (row.values[c].has_value()) {
          connection_->AppendLiteral(*row.values[c], sql_);
        } else {
          sql_ += "NULL";
        }
      }
      sql_ += ')';
    }
    sql_ += statements_.on_duplicate;
    absl::StatusOr<MySqlRows> upserted = connection_->Exec(sql_);
    if (!upserted.ok()) return fail(upserted.status());
  }
  absl::StatusOr<MySqlRows> committed = connection_->Exec("COMMIT");
  if (!committed.ok()) return fail(committed.status());
  return absl::OkStatus();
}

void MySqlUpsertSink::Flush() {
  if (pending_.empty()) return;
  absl::Status status = SendBatchUntilSent(
      kMySqlReconnectTimeout, [&] { return SendBatch(); },
      [](const absl::Status& s) {
        // A deadlock or lock wait timeout rolled the batch back.
        if (absl::IsAborted(s)) return BatchFailure::kRolledBack;
        return absl::IsUnavailable(s) ? BatchFailure::kConnectionLost : BatchFailure::kFatal;
      },
      [&] {
        Connect(/*retry=*/true);
        logging::Get("mysql")->info("{}: reconnected to MySQL {}", client_, connection_->server());
      },
      *logging::Get("mysql"), client_);
  if (!status.ok()) Throw(status);
  if (rows_metric_ != nullptr) rows_metric_->Inc(static_cast<int64_t>(pending_.size()));
  if (batches_metric_ != nullptr) batches_metric_->Inc();
  pending_.clear();
}

void MySqlUpsertSink::PrepareSnapshotPreBarrier(int64_t) { Flush(); }

void MySqlUpsertSink::EndInput() { Flush(); }

void MySqlUpsertSink::OnIdle() { Flush(); }

void MySqlUpsertSink::Close() { connection_.reset(); }

}  // namespace weir::connectors
