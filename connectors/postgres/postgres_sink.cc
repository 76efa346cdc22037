#include "connectors/postgres/postgres_sink.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging/logging.h"
#include "common/process/fault_injection.h"
#include "connectors/reconnect.h"
#include "connectors/system_library.h"

namespace weir::connectors {
namespace {

constexpr size_t kMaxPrefixLength = 150;  // a gid has at most 200 bytes

bool IsIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (!(absl::ascii_isalpha(name[0]) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

absl::Status BadProperty(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(kPostgresSinkConnector, ": property '", key, "' is '", value, "'; expected ", expected));
}

std::string Property(const Properties& properties, const std::string& key) { return PropertyOr(properties, key); }

constexpr char kStagingTable[] = "pg_temp.weir_upsert";
constexpr char kSequenceColumn[] = "weir_upsert_seq";

// A checked identifier (IsIdentifier) as PostgreSQL reads it unquoted:
// folded to lower case. Quoted, so that reserved words work.
std::string Quoted(absl::string_view name) { return absl::StrCat("\"", absl::AsciiStrToLower(name), "\""); }

std::string QuotedTable(const std::string& table) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(table, '.')) parts.push_back(Quoted(part));
  return absl::StrJoin(parts, ".");
}

std::string QuotedList(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back(Quoted(n));
  return absl::StrJoin(quoted, ", ");
}

bool IsKey(const PostgresSinkConfig& config, const std::string& column) {
  return std::any_of(config.key_columns.begin(), config.key_columns.end(),
                     [&](const std::string& k) { return absl::AsciiStrToLower(k) == absl::AsciiStrToLower(column); });
}

std::string SinkClient(const SinkContext& context) {
  return absl::StrCat("PostgresSink '", context.operator_name, "' subtask ", context.subtask_index, "/",
                      context.parallelism);
}

}  // namespace

absl::StatusOr<PostgresSinkConfig> PostgresSinkConfig::FromProperties(const Properties& properties) {
  PostgresSinkConfig config;
  config.conninfo = Property(properties, "conninfo");
  if (config.conninfo.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kPostgresSinkConnector, ": property 'conninfo' is missing; set "
                                                   "SinkOptions::conninfo to a libpq connection string"));
  }
  config.table = Property(properties, "table");
  const std::vector<std::string> table_parts = absl::StrSplit(config.table, '.');
  if (table_parts.size() > 2 || !std::all_of(table_parts.begin(), table_parts.end(), IsIdentifier)) {
    return BadProperty("table", config.table,
                       "[schema.]table made of letters, digits and '_' (an unquoted SQL identifier)");
  }
  const std::string columns = Property(properties, "columns");
  for (absl::string_view c : absl::StrSplit(columns, ',')) {
    if (!IsIdentifier(std::string(c))) {
      return BadProperty("columns", columns, "comma-separated column names of letters, digits and '_'");
    }
    config.columns.emplace_back(c);
  }
  if (config.columns.size() > 1600) return BadProperty("columns", "...", "at most 1600 columns");
  config.create_table = Property(properties, "create.table");
  if (config.create_table.find(';') != std::string::npos) {
    return BadProperty("create.table", config.create_table,
                       "column definitions such as 'key text, count bigint', without ';'");
  }
  const std::string strategy = Property(properties, "strategy");
  bool known = false;
  for (postgres::Strategy s : {postgres::Strategy::kAtLeastOnce, postgres::Strategy::kTwoPhaseCommit,
                               postgres::Strategy::kWriteAhead, postgres::Strategy::kUpsert}) {
    if (strategy == postgres::StrategyName(s)) {
      config.strategy = s;
      known = true;
    }
  }
  if (!known) return BadProperty("strategy", strategy, "at-least-once, two-phase-commit, write-ahead or upsert");
  const char* guarantee = config.strategy == postgres::Strategy::kAtLeastOnce ||
                                  config.strategy == postgres::Strategy::kUpsert
                              ? kAtLeastOnce
                              : kExactlyOnce;
  if (Property(properties, kGuaranteeProperty) != guarantee) {
    return BadProperty(kGuaranteeProperty, Property(properties, kGuaranteeProperty),
                       absl::StrCat("'", guarantee, "' with strategy ", strategy));
  }
  config.transaction_prefix = Property(properties, "transaction.prefix");
  const bool prefix_ok =
      !config.transaction_prefix.empty() && config.transaction_prefix.size() <= kMaxPrefixLength &&
      std::all_of(config.transaction_prefix.begin(), config.transaction_prefix.end(),
                  [](char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; });
  if (!prefix_ok) {
    return BadProperty("transaction.prefix", config.transaction_prefix,
                       absl::StrCat("1 to ", kMaxPrefixLength, " letters, digits, '.', '_' or '-'"));
  }
  const std::string batch = Property(properties, "batch.rows");
  if (!absl::SimpleAtoi(batch, &config.batch_rows) || config.batch_rows < 1 || config.batch_rows > 1000000) {
    return BadProperty("batch.rows", batch, "rows per COPY, 1 to 1000000");
  }
  const std::string keys = Property(properties, "key.columns");
  if (config.strategy != postgres::Strategy::kUpsert) {
    if (!keys.empty()) {
      return BadProperty("key.columns", keys,
                         absl::StrCat("nothing with strategy ", strategy,
                                      " (key columns are for strategy upsert; drop SinkOptions::key_columns or set "
                                      "Strategy::kUpsert)"));
    }
    return config;
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kPostgresSinkConnector, ": property 'key.columns' is missing; strategy upsert needs the columns of the "
        "table's primary key (SinkOptions::key_columns, e.g. {\"key\"})"));
  }
  std::set<std::string> seen;
  for (absl::string_view k : absl::StrSplit(keys, ',')) {
    const std::string key(k);
    if (!IsIdentifier(key)) {
      return BadProperty("key.columns", keys, "comma-separated column names of letters, digits and '_'");
    }
    // Unquoted names fold to lower case: "Key" and "key" are one column.
    const std::string folded = absl::AsciiStrToLower(key);
    if (!seen.insert(folded).second) return BadProperty("key.columns", keys, "each key column once");
    if (std::none_of(config.columns.begin(), config.columns.end(),
                     [&](const std::string& c) { return absl::AsciiStrToLower(c) == folded; })) {
      return BadProperty("key.columns", keys,
                         absl::StrCat("columns among 'columns' (", columns, "); '", key, "' is not one of them"));
    }
    config.key_columns.push_back(key);
  }
  std::set<std::string> distinct_columns;
  for (const std::string& c : config.columns) {
    if (!distinct_columns.insert(absl::AsciiStrToLower(c)).second) {
      return BadProperty("columns", columns, "each column once (an upsert sets each column once)");
    }
    if (absl::AsciiStrToLower(c) == "weir_upsert_seq") {
      return BadProperty("columns", columns, "columns other than weir_upsert_seq (the sink's own staging column)");
    }
  }
  return config;
}

// ---------------------------------------------------------------- row writer

PostgresRowWriter::PostgresRowWriter(PostgresSinkConfig config, std::string client)
    : config_(std::move(config)),
      client_(std::move(client)),
      copy_statement_(absl::StrCat("COPY ", config_.table, " (", absl::StrJoin(config_.columns, ", "),
                                   ") FROM STDIN")) {}

void PostgresRowWriter::Throw(const absl::Status& status) const {
  if (absl::IsInvalidArgument(status)) {
    // The same rows come again after a restart: fail the job instead.
    throw UnrecoverableError(absl::StrCat(
        client_, ": ", status.message(),
        "; the table refuses rows the job writes (a restart would write them again); fix the job or the table (a "
        "unique key on the table and at-least-once output, which replays rows after a failure, do not go "
        "together: use the two-phase-commit strategy)"));
  }
  throw std::runtime_error(absl::StrCat(client_, ": ", status.message()));
}

void PostgresRowWriter::Connect(std::unique_ptr<PostgresConnection>* connection) const {
  ThrowUnlessLoaded(PostgresConnection::LoadLibrary(), client_);
  absl::StatusOr<std::unique_ptr<PostgresConnection>> c = PostgresConnection::Connect(config_.conninfo, "weir");
  if (!c.ok()) Throw(c.status());
  *connection = *std::move(c);
}

void PostgresRowWriter::Reconnect(std::unique_ptr<PostgresConnection>* connection) const {
  const retry::RetryOutcome outcome = retry::Retry(
      ReconnectPolicy(kPostgresReconnectTimeout),
      [&] {
        absl::StatusOr<std::unique_ptr<PostgresConnection>> c = PostgresConnection::Connect(config_.conninfo, "weir");
        if (c.ok()) *connection = *std::move(c);
        return c.status();
      },
      // Refused credentials do not get better by waiting.
      [](const absl::Status& s) { return !absl::IsUnauthenticated(s); });
  if (!outcome.status.ok()) {
    Throw(absl::Status(outcome.status.code(),
                       absl::StrCat(outcome.status.message(), " (tried for ",
                                    absl::FormatDuration(kPostgresReconnectTimeout), ": ", outcome.Summary(), ")")));
  }
  logging::Get("postgres")->info("{}: reconnected to PostgreSQL {}", client_, (*connection)->server());
}

void PostgresRowWriter::CreateTable(PostgresConnection& connection) const {
  if (config_.create_table.empty()) return;
  // Subtasks starting together would race on CREATE TABLE IF NOT EXISTS.
  absl::StatusOr<PostgresRows> created = connection.Exec(absl::StrCat(
      "BEGIN; SELECT pg_advisory_xact_lock(hashtext(", connection.Literal("weir-create " + config_.table),
      ")); CREATE TABLE IF NOT EXISTS ", QuotedTable(config_.table), " (", config_.create_table, "); COMMIT"));
  if (!created.ok()) {
    (void)connection.Exec("ROLLBACK");
    Throw(created.status());
  }
}

bool PostgresRowWriter::Add(const postgres::Row& row) {
  if (row.values.size() != config_.columns.size()) {
    throw UnrecoverableError(absl::StrCat(client_, ": a row has ", row.values.size(), " values, but the sink writes ",
                                          config_.columns.size(), " columns (", absl::StrJoin(config_.columns, ", "),
                                          "); make the job's rows match SinkOptions::columns"));
  }
  for (size_t i = 0; i < row.values.size(); ++i) {
    if (i > 0) buffer_.push_back('\t');
    AppendCopyText(row.values[i], buffer_);
  }
  buffer_.push_back('\n');
  return ++rows_ >= static_cast<size_t>(config_.batch_rows);
}

absl::Status PostgresRowWriter::Flush(PostgresConnection& connection) {
  if (rows_ == 0) return absl::OkStatus();
  absl::Status status = connection.Copy(copy_statement_, buffer_);
  if (status.ok()) Discard();
  return status;
}

void PostgresRowWriter::Discard() {
  buffer_.clear();
  rows_ = 0;
}

// ---------------------------------------------------------------- at-least-once

PostgresAtLeastOnceSink::PostgresAtLeastOnceSink(PostgresSinkConfig config) : config_(std::move(config)) {}

void PostgresAtLeastOnceSink::Open(OperatorContext& context, RecordOutput* output) {
  writer_.emplace(config_, SinkClient({.operator_name = context.operator_name(),
                                       .subtask_index = context.subtask_index(),
                                       .parallelism = context.parallelism()}));
  writer_->Connect(&connection_);
  writer_->CreateTable(*connection_);
}

void PostgresAtLeastOnceSink::Process(void* record) {
  if (writer_->Add(*static_cast<const postgres::Row*>(record))) Flush();
}

void PostgresAtLeastOnceSink::Flush() {
  absl::Status status = SendBatchUntilSent(
      kPostgresReconnectTimeout, [&] { return writer_->Flush(*connection_); },
      [](const absl::Status& s) {
        return absl::IsUnavailable(s) ? BatchFailure::kConnectionLost : BatchFailure::kFatal;
      },
      [&] { writer_->Reconnect(&connection_); }, *logging::Get("postgres"), writer_->client());
  if (!status.ok()) writer_->Throw(status);
}

void PostgresAtLeastOnceSink::PrepareSnapshotPreBarrier(int64_t) { Flush(); }

void PostgresAtLeastOnceSink::EndInput() { Flush(); }

void PostgresAtLeastOnceSink::OnIdle() {
  if (writer_->buffered_rows() > 0) Flush();
}

void PostgresAtLeastOnceSink::Close() { connection_.reset(); }

// ---------------------------------------------------------------- upsert

PostgresUpsertStatements::PostgresUpsertStatements(const PostgresSinkConfig& config) {
  const std::string table = QuotedTable(config.table);
  const std::string columns = QuotedList(config.columns);
  const std::string keys = QuotedList(config.key_columns);
  // The staging table takes the table's column types; its rows go at
  // COMMIT (and with a ROLLBACK).
  create_staging = absl::StrCat("CREATE TEMPORARY TABLE IF NOT EXISTS ", kStagingTable,
                                " ON COMMIT DELETE ROWS AS SELECT 0::bigint AS ", kSequenceColumn, ", ", columns,
                                " FROM ", table, " WITH NO DATA");
  copy = absl::StrCat("COPY ", kStagingTable, " (", kSequenceColumn, ", ", columns, ") FROM STDIN");
  std::vector<std::string> updates;
  for (const std::string& c : config.columns) {
    if (!IsKey(config, c)) updates.push_back(absl::StrCat(Quoted(c), " = EXCLUDED.", Quoted(c)));
  }
  // DISTINCT ON keeps the newest row of each key as the server compares
  // keys (the sink merged rows whose key text is equal; '1' and '01' of an
  // integer key are one key only to the server). One INSERT must not touch
  // a row twice.
  upsert = absl::StrCat("INSERT INTO ", table, " (", columns, ") SELECT DISTINCT ON (", keys, ") ", columns,
                        " FROM ", kStagingTable, " ORDER BY ", keys, ", ", kSequenceColumn, " DESC ON CONFLICT (",
                        keys, ") DO ",
                        updates.empty() ? "NOTHING" : absl::StrCat("UPDATE SET ", absl::StrJoin(updates, ", ")));
}

PostgresUpsertSink::PostgresUpsertSink(PostgresSinkConfig config)
    : config_(std::move(config)), statements_(config_) {
  for (size_t i = 0; i < config_.columns.size(); ++i) {
    if (IsKey(config_, config_.columns[i])) key_indexes_.push_back(i);
  }
}

void PostgresUpsertSink::Throw(const absl::Status& status) const {
  if (absl::IsInvalidArgument(status)) {
    // The same rows come again after a restart: fail the job instead.
    throw UnrecoverableError(absl::StrCat(client_, ": ", status.message(),
                                          "; the table refuses rows the job writes (a restart would write them "
                                          "again); fix the job's rows or the table's definition"));
  }
  throw std::runtime_error(absl::StrCat(client_, ": ", status.message()));
}

void PostgresUpsertSink::Open(OperatorContext& context, RecordOutput*) {
  client_ = SinkClient(
      {.operator_name = context.operator_name(), .subtask_index = context.subtask_index(), .parallelism = context.parallelism()});
  writer_.emplace(config_, client_);
  writer_->Connect(&connection_);
  writer_->CreateTable(*connection_);
  if (absl::Status prepared = PrepareConnection(); !prepared.ok()) Throw(prepared);
  const MetricLabels table = {{"table", config_.table}};
  rows_metric_ = &context.metrics().counter("weir_postgres_upserted_rows_total",
                                            "Rows the upsert sink sent (a key's rows within a batch count once).",
                                            table);
  batches_metric_ =
      &context.metrics().counter("weir_postgres_upsert_batches_total", "Batches the upsert sink committed.", table);
  logging::Get("postgres")
      ->info("{}: upserting into {} on PostgreSQL {}, key ({})", client_, config_.table, connection_->server(),
             absl::StrJoin(config_.key_columns, ", "));
}

absl::Status PostgresUpsertSink::PrepareConnection() {
  absl::StatusOr<PostgresRows> created = connection_->Exec(statements_.create_staging);
  if (!created.ok()) return created.status();
  // The upsert of an empty staging table: the server checks the ON
  // CONFLICT target against the table's constraints now, not at the first
  // barrier.
  absl::StatusOr<PostgresRows> checked = connection_->Exec(statements_.upsert);
  if (!checked.ok() && absl::StrContains(checked.status().message(), "42P10")) {
    throw UnrecoverableError(absl::StrCat(
        client_, ": table ", config_.table, " has no primary key or unique constraint on exactly (",
        absl::StrJoin(config_.key_columns, ", "), "), which the upsert strategy needs (", checked.status().message(),
        "); add one (ALTER TABLE ", config_.table, " ADD PRIMARY KEY (", absl::StrJoin(config_.key_columns, ", "),
        "), or 'PRIMARY KEY' in SinkOptions::create_table) or make key_columns name the table's key"));
  }
  return checked.status();
}

void PostgresUpsertSink::Process(void* record) {
  const postgres::Row& row = *static_cast<const postgres::Row*>(record);
  if (row.values.size() != config_.columns.size()) {
    throw UnrecoverableError(absl::StrCat(client_, ": a row has ", row.values.size(), " values, but the sink writes ",
                                          config_.columns.size(), " columns (", absl::StrJoin(config_.columns, ", "),
                                          "); make the job's rows match SinkOptions::columns"));
  }
  // The key's values, each length-prefixed (or 'N' for NULL).
  std::string key;
  for (size_t i : key_indexes_) {
    const std::optional<std::string>& v = row.values[i];
    if (v.has_value()) {
      absl::StrAppend(&key, "V", v->size(), ":", *v);
    } else {
      key += 'N';
    }
  }
  auto [it, inserted] = pending_by_key_.try_emplace(std::move(key), pending_.size());
  if (inserted) {
    pending_.push_back({++sequence_, row});
  } else {
    pending_[it->second] = {++sequence_, row};
  }
  if (pending_.size() >= static_cast<size_t>(config_.batch_rows)) Flush();
}

absl::Status PostgresUpsertSink::SendBatch() {
  copy_buffer_.clear();
  for (const Pending& p : pending_) {
    absl::StrAppend(&copy_buffer_, p.sequence);
    for (const std::optional<std::string>& v : p.row.values) {
      copy_buffer_.push_back('\t');
      AppendCopyText(v, copy_buffer_);
    }
    copy_buffer_.push_back('\n');
  }
  auto fail = [&](const absl::Status& status) {
    if (!connection_->broken()) (void)connection_->Exec("ROLLBACK");
    return status;
  };
  absl::StatusOr<PostgresRows> begun = connection_->Exec("BEGIN");
  if (!begun.ok()) return fail(begun.status());
  if (absl::Status copied = connection_->Copy(statements_.copy, copy_buffer_); !copied.ok()) return fail(copied);
  absl::StatusOr<PostgresRows> upserted = connection_->Exec(statements_.upsert);
  if (!upserted.ok()) return fail(upserted.status());
  absl::StatusOr<PostgresRows> committed = connection_->Exec("COMMIT");
  if (!committed.ok()) return fail(committed.status());
  return absl::OkStatus();
}

void PostgresUpsertSink::Flush() {
  if (pending_.empty()) return;
  absl::Status status = SendBatchUntilSent(
      kPostgresReconnectTimeout, [&] { return SendBatch(); },
      [](const absl::Status& s) {
        // A deadlock or serialization failure rolled the batch back.
        if (absl::StrContains(s.message(), "(SQLSTATE 40P01)") || absl::StrContains(s.message(), "(SQLSTATE 40001)")) {
          return BatchFailure::kRolledBack;
        }
        return absl::IsUnavailable(s) ? BatchFailure::kConnectionLost : BatchFailure::kFatal;
      },
      [&] {
        writer_->Reconnect(&connection_);
        if (absl::Status prepared = PrepareConnection(); !prepared.ok() && !absl::IsUnavailable(prepared)) {
          Throw(prepared);
        }
      },
      *logging::Get("postgres"), client_);
  if (!status.ok()) Throw(status);
  if (rows_metric_ != nullptr) rows_metric_->Inc(static_cast<int64_t>(pending_.size()));
  if (batches_metric_ != nullptr) batches_metric_->Inc();
  pending_.clear();
  pending_by_key_.clear();
}

void PostgresUpsertSink::PrepareSnapshotPreBarrier(int64_t) { Flush(); }

void PostgresUpsertSink::EndInput() { Flush(); }

void PostgresUpsertSink::OnIdle() { Flush(); }

void PostgresUpsertSink::Close() { connection_.reset(); }

// ---------------------------------------------------------------- two-phase commit

PostgresTwoPhaseCommitSink::PostgresTwoPhaseCommitSink(PostgresSinkConfig config)
    : config_(std::move(config)), log_(logging::Get("postgres")) {}

std::string PostgresTwoPhaseCommitSink::GidPrefix(int subtask) const {
  return absl::StrCat(config_.transaction_prefix, "-", subtask, "-");
}

void PostgresTwoPhaseCommitSink::Open(const SinkContext& context) {
  subtask_ = context.subtask_index;
  parallelism_ = context.parallelism;
  writer_.emplace(config_, SinkClient(context));
  writer_->Connect(&connection_);
  writer_->Connect(&committer_);
  absl::StatusOr<PostgresRows> max = committer_->Exec("SHOW max_prepared_transactions");
  if (!max.ok()) writer_->Throw(max.status());
  int64_t slots = 0;
  if (max->empty() || !(*max)[0][0].has_value() || !absl::SimpleAtoi(*(*max)[0][0], &slots) || slots == 0) {
    throw UnrecoverableError(absl::StrCat(
        writer_->client(), ": PostgreSQL ", committer_->server(),
        " has max_prepared_transactions = 0, so it cannot prepare transactions, which the two-phase-commit "
        "strategy needs; set max_prepared_transactions in postgresql.conf to at least twice the sink's "
        "parallelism summed over the jobs that write to it (here at least ",
        2 * context.parallelism, ") and restart the server, or use Strategy::kWriteAhead"));
  }
  // Transaction names are unique per server, not per database.
  absl::StatusOr<PostgresRows> elsewhere = committer_->Exec(
      "SELECT database FROM pg_prepared_xacts WHERE database <> current_database() AND starts_with(gid, $1) LIMIT 1",
      {config_.transaction_prefix + "-"});
  if (!elsewhere.ok()) writer_->Throw(elsewhere.status());
  if (!elsewhere->empty()) {
    throw UnrecoverableError(absl::StrCat(
        writer_->client(), ": database '", (*elsewhere)[0][0].value_or("?"), "' on PostgreSQL ", committer_->server(),
        " holds prepared transactions named '", config_.transaction_prefix,
        "-...': transaction names are shared by all databases of a server, so another sink writes with this "
        "prefix; give one of them its own transaction_prefix (SinkOptions::transaction_prefix)"));
  }
  writer_->CreateTable(*committer_);
  if (context.operator_context != nullptr) {
    MetricGroup& metrics = context.operator_context->metrics();
    const MetricLabels table = {{"table", config_.table}};
    committed_metric_ = &metrics.counter("weir_postgres_transactions_committed_total",
                                         "Prepared transactions committed when their checkpoint completed.", table);
    recovery_commits_metric_ = &metrics.counter(
        "weir_postgres_transactions_recovery_commits_total",
        "Prepared transactions of a restored checkpoint committed (again) at the start of a task.", table);
    rolled_back_metric_ = &metrics.counter(
        "weir_postgres_transactions_rolled_back_total",
        "Prepared transactions an earlier attempt left that no completed checkpoint lists, rolled back.", table);
  }
}

void PostgresTwoPhaseCommitSink::BeginTransaction() {
  absl::StatusOr<PostgresRows> begun = connection_->Exec("BEGIN");
  if (!begun.ok()) writer_->Throw(begun.status());
}

void PostgresTwoPhaseCommitSink::Write(const postgres::Row& row) {
  if (!writer_->Add(row)) return;
  absl::Status status = writer_->Flush(*connection_);
  if (!status.ok()) writer_->Throw(status);
}

std::string PostgresTwoPhaseCommitSink::PreCommit(int64_t checkpoint_id) {
  absl::Status status = writer_->Flush(*connection_);
  if (!status.ok()) writer_->Throw(status);
  std::string gid = absl::StrCat(GidPrefix(subtask_), checkpoint_id);
  absl::StatusOr<PostgresRows> prepared = connection_->Exec("PREPARE TRANSACTION " + connection_->Literal(gid));
  if (!prepared.ok()) writer_->Throw(prepared.status());
  return gid;
}

void PostgresTwoPhaseCommitSink::Commit(const std::string& gid) {
  CommitPrepared(gid, /*absent_is_committed=*/false);
  if (committed_metric_ != nullptr) committed_metric_->Inc();
}

void PostgresTwoPhaseCommitSink::CommitOnRecovery(const std::string& gid) {
  CommitPrepared(gid, /*absent_is_committed=*/true);
  if (recovery_commits_metric_ != nullptr) recovery_commits_metric_->Inc();
}

void PostgresTwoPhaseCommitSink::CommitPrepared(const std::string& gid, bool absent_is_committed) {
  // Set once a COMMIT PREPARED was sent and its answer lost: it may have
  // committed.
  bool lost_connection = false;
  const absl::Time deadline = absl::Now() + kPostgresReconnectTimeout;
  for (;;) {
    if (committer_ == nullptr || committer_->broken()) writer_->Reconnect(&committer_);
    absl::StatusOr<PostgresRows> committed = committer_->Exec("COMMIT PREPARED " + committer_->Literal(gid));
    if (committed.ok()) return;
    if (absl::IsNotFound(committed.status())) {
      if (absent_is_committed || lost_connection) {
        log_->info("{}: prepared transaction '{}' is no longer there: it was committed before", writer_->client(),
                   gid);
        return;
      }
      throw UnrecoverableError(absl::StrCat(
          "DATA LOSS: ", writer_->client(), ": prepared transaction '", gid,
          "' of a completed checkpoint no longer exists on PostgreSQL ", committer_->server(),
          " (someone ran ROLLBACK PREPARED on it?); its rows are lost"));
    }
    if (!absl::IsUnavailable(committed.status()) || absl::Now() > deadline) writer_->Throw(committed.status());
    log_->warn("{}: {}; committing again on a new connection", writer_->client(), committed.status());
    lost_connection = true;
    committer_.reset();
  }
}

void PostgresTwoPhaseCommitSink::Abort() {
  writer_->Discard();
  if (connection_ == nullptr || connection_->broken()) return;  // the server rolled it back
  absl::StatusOr<PostgresRows> rolled_back = connection_->Exec("ROLLBACK");
  if (!rolled_back.ok()) log_->warn("{}: {}", writer_->client(), rolled_back.status());
}

void PostgresTwoPhaseCommitSink::AbortLingering(int old_subtask, const std::vector<std::string>& restored) {
  // Called for each old subtask this one answers for, as far as the
  // restored state tells the old parallelism; one pass over every
  // '<prefix>-<o>-<checkpoint>' with o % parallelism == subtask covers them
  // all, also those of a run at a higher parallelism that left no state.
  if (lingering_done_) return;
  lingering_done_ = true;
  const std::string prefix = config_.transaction_prefix + "-";
  absl::StatusOr<PostgresRows> found = committer_->Exec(
      "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)", {prefix});
  if (!found.ok()) writer_->Throw(found.status());
  const std::set<std::string> keep(restored.begin(), restored.end());
  for (const auto& row : *found) {
    if (row.empty() || !row[0].has_value()) continue;
    const std::string& gid = *row[0];
    // Only '<prefix>-<digits>-<digits>': never another sink's.
    const std::vector<std::string> parts = absl::StrSplit(gid.substr(prefix.size()), '-');
    int o = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &o) || o < 0 || parts[1].empty() ||
        !std::all_of(parts[0].begin(), parts[0].end(), absl::ascii_isdigit) ||
        !std::all_of(parts[1].begin(), parts[1].end(), absl::ascii_isdigit)) {
      continue;
    }
    if (o % parallelism_ != subtask_ || keep.contains(gid)) continue;
    absl::StatusOr<PostgresRows> rolled_back = committer_->Exec("ROLLBACK PREPARED " + committer_->Literal(gid));
    if (!rolled_back.ok() && !absl::IsNotFound(rolled_back.status())) writer_->Throw(rolled_back.status());
    log_->info("{}: rolled back prepared transaction '{}', which no completed checkpoint lists", writer_->client(),
               gid);
    if (rolled_back_metric_ != nullptr) rolled_back_metric_->Inc();
  }
}

void PostgresTwoPhaseCommitSink::Close() {
  connection_.reset();
  committer_.reset();
}

// ---------------------------------------------------------------- write-ahead

namespace {
constexpr char kBatchesTable[] = "weir_sink_batches";
// Rows of weir_sink_batches kept per sink and subtask: a restore asks about
// the few batches its checkpoint lists, all among the newest.
constexpr int kBatchesKept = 1000;
constexpr int kPruneEvery = 100;
}  // namespace

PostgresWriteAheadSink::PostgresWriteAheadSink(PostgresSinkConfig config)
    : config_(std::move(config)), log_(logging::Get("postgres")) {}

void PostgresWriteAheadSink::Open(const SinkContext& context) {
  writer_.emplace(config_, SinkClient(context));
  writer_->Connect(&connection_);
  writer_->CreateTable(*connection_);
  absl::StatusOr<PostgresRows> created = connection_->Exec(absl::StrCat(
      "BEGIN; SELECT pg_advisory_xact_lock(hashtext('weir-create ", kBatchesTable, "')); CREATE TABLE IF NOT EXISTS ",
      kBatchesTable,
      " (sink text, batch_id text, subtask int, checkpoint_id bigint, written_at timestamptz NOT NULL DEFAULT "
      "now(), PRIMARY KEY (sink, batch_id)); COMMIT"));
  if (!created.ok()) {
    (void)connection_->Exec("ROLLBACK");
    writer_->Throw(created.status());
  }
  if (context.operator_context != nullptr) {
    batches_metric_ = &context.operator_context->metrics().counter(
        "weir_postgres_write_ahead_batches_total", "Batches of completed checkpoints the write-ahead sink wrote.",
        {{"table", config_.table}});
  }
}

void PostgresWriteAheadSink::WriteBatch(const WriteAheadBatch& batch, const std::vector<postgres::Row>& rows) {
  auto fail = [&](const absl::Status& status) {
    writer_->Discard();
    if (!connection_->broken()) (void)connection_->Exec("ROLLBACK");
    writer_->Throw(status);
  };
  // Every part but the last in its own autocommitted COPY; the last one
  // and the batch's row in weir_sink_batches in one transaction.
  size_t i = 0;
  for (; i < rows.size(); ++i) {
    if (!writer_->Add(rows[i]) || i + 1 == rows.size()) continue;
    if (absl::Status s = writer_->Flush(*connection_); !s.ok()) fail(s);
    fault::MaybeCrash(fault::Point::kTaskManagerMidWriteAheadBatch, batch.checkpoint_id);
  }
  absl::StatusOr<PostgresRows> begun = connection_->Exec("BEGIN");
  if (!begun.ok()) fail(begun.status());
  if (absl::Status s = writer_->Flush(*connection_); !s.ok()) fail(s);
  absl::StatusOr<PostgresRows> marked = connection_->Exec(
      absl::StrCat("INSERT INTO ", kBatchesTable, " (sink, batch_id, subtask, checkpoint_id) VALUES ($1, $2, $3, $4)"),
      {config_.transaction_prefix, batch.id, absl::StrCat(batch.subtask), absl::StrCat(batch.checkpoint_id)});
  if (!marked.ok()) fail(marked.status());
  absl::StatusOr<PostgresRows> committed = connection_->Exec("COMMIT");
  if (!committed.ok()) fail(committed.status());
  if (batches_metric_ != nullptr) batches_metric_->Inc();
  if (++batches_written_ % kPruneEvery == 0) {
    absl::StatusOr<PostgresRows> pruned = connection_->Exec(
        absl::StrCat("DELETE FROM ", kBatchesTable, " WHERE sink = $1 AND subtask = $2 AND batch_id NOT IN (SELECT "
                     "batch_id FROM ", kBatchesTable, " WHERE sink = $1 AND subtask = $2 ORDER BY written_at DESC "
                     "LIMIT ", kBatchesKept, ")"),
        {config_.transaction_prefix, absl::StrCat(batch.subtask)});
    if (!pruned.ok()) log_->warn("{}: {}", writer_->client(), pruned.status());
  }
}

bool PostgresWriteAheadSink::IsWritten(const WriteAheadBatch& batch) {
  absl::StatusOr<PostgresRows> found = connection_->Exec(
      absl::StrCat("SELECT 1 FROM ", kBatchesTable, " WHERE sink = $1 AND batch_id = $2"),
      {config_.transaction_prefix, batch.id});
  if (!found.ok()) writer_->Throw(found.status());
  return !found->empty();
}

void PostgresWriteAheadSink::ForgetWritten() {
  absl::StatusOr<PostgresRows> forgotten = connection_->Exec(
      absl::StrCat("DELETE FROM ", kBatchesTable, " WHERE sink = $1"), {config_.transaction_prefix});
  if (!forgotten.ok()) writer_->Throw(forgotten.status());
}

void PostgresWriteAheadSink::Close() { connection_.reset(); }

// ---------------------------------------------------------------- connector

absl::Status PostgresSinkConnector::Validate(const Properties& properties) const {
  return PostgresSinkConfig::FromProperties(properties).status();
}

std::optional<ExclusiveNameClaim> PostgresSinkConnector::ExclusiveName(const Properties& properties) const {
  absl::StatusOr<PostgresSinkConfig> config = PostgresSinkConfig::FromProperties(properties);
  if (!config.ok() || config->strategy == postgres::Strategy::kAtLeastOnce ||
      config->strategy == postgres::Strategy::kUpsert) {
    return std::nullopt;
  }
  return ExclusiveNameClaim{.name = config->transaction_prefix,
                            .what = "PostgreSQL transaction prefix",
                            .use = "writes to PostgreSQL with",
                            .conflict = "roll back each other's prepared transactions or skip each other's batches",
                            .setting = "transaction_prefix"};
}

absl::StatusOr<std::unique_ptr<weir::StreamOperator>> PostgresSinkConnector::CreateSink(
    const Properties& properties) const {
  absl::StatusOr<PostgresSinkConfig> config = PostgresSinkConfig::FromProperties(properties);
  if (!config.ok()) return config.status();
  switch (config->strategy) {
    case postgres::Strategy::kAtLeastOnce:
      return std::make_unique<PostgresAtLeastOnceSink>(*std::move(config));
    case postgres::Strategy::kTwoPhaseCommit:
      return std::make_unique<weir::internal::TwoPhaseCommitOperator<PostgresTwoPhaseCommitSink>>(
          std::make_unique<PostgresTwoPhaseCommitSink>(*std::move(config)));
    case postgres::Strategy::kWriteAhead:
      return std::make_unique<weir::internal::WriteAheadOperator<PostgresWriteAheadSink>>(
          std::make_unique<PostgresWriteAheadSink>(*std::move(config)));
    case postgres::Strategy::kUpsert:
      return std::make_unique<PostgresUpsertSink>(*std::move(config));
  }
  return absl::InternalError("unknown strategy");
}

}  // namespace weir::connectors
