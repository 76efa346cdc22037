// The built-in "postgres-sink" connector: weir::postgres::Row values into
// one table of a PostgreSQL database with libpq, by one of four strategies
// (weir/postgres.h says what each guarantees; docs/exactly-once.md compares
// them):
//
//   at-least-once     PostgresAtLeastOnceSink: autocommitted COPY of
//                     batch.rows rows; flushed at every barrier, at the end
//                     of input and whenever the task's input runs dry. A lost connection is reconnected (with
//                     backoff, up to kReconnectTimeout) and the unconfirmed
//                     rows are sent again.
//   two-phase-commit  PostgresTwoPhaseCommitSink on weir/two_phase_commit.h:
//                     BEGIN at the first row after a barrier, COPY as rows
//                     come, PREPARE TRANSACTION '<prefix>-<subtask>-<n>' at
//                     barrier n, COMMIT PREPARED once n completed (on a
//                     second connection, while the first writes the next
//                     transaction). On start, the restored transactions are
//                     committed (one that no longer exists was committed
//                     before) and every other prepared transaction named
//                     '<prefix>-<o>-<digits>' with o % parallelism ==
//                     subtask is rolled back, whatever the old parallelism.
//                     Transaction names are unique per server: a prefix
//                     that another database's prepared transactions use
//                     fails the job at start.
//   write-ahead       PostgresWriteAheadSink on weir/write_ahead.h: a
//                     completed checkpoint's rows in COPYs of batch.rows
//                     rows, each autocommitted but the last, which commits
//                     together with the batch's row in weir_sink_batches
//                     (sink = the transaction prefix, batch_id, subtask,
//                     checkpoint_id, written_at; the newest 1000 per sink
//                     and subtask are kept). A crash between two COPYs of a
//                     batch writes its earlier COPYs again after recovery.
//   upsert            PostgresUpsertSink: rows buffered by key (a key's
//                     later row replaces its earlier one), at batch.rows
//                     keys, every barrier, the end of input and when input
//                     runs dry sent in one transaction: COPY into a
//                     temporary table, then INSERT ... SELECT DISTINCT ON
//                     (keys) ... ON CONFLICT (keys) DO UPDATE (DO NOTHING
//                     when every column is a key). Reconnects like
//                     at-least-once and sends the batch again, which
//                     changes nothing the first try committed.
//
// Properties (written by weir::postgres::Sink): conninfo, table, columns
// (comma-separated), strategy, transaction.prefix, batch.rows, guarantee,
// and optionally create.table (column definitions; the table is created if
// missing, under an advisory lock so that subtasks do not race) and
// key.columns (comma-separated; required by upsert and refused by the
// others).
//
// A lost connection fails the two-phase-commit and write-ahead sinks' task
// (the open transaction is gone with it; the job restarts by its strategy
// and recovery writes again what no completed checkpoint covers); a COMMIT
// PREPARED that lost its connection is retried on a new one.
//
// Thread-safety: one task thread calls every method (weir/operator.h).
#ifndef WEIR_CONNECTORS_POSTGRES_POSTGRES_SINK_H_
#define WEIR_CONNECTORS_POSTGRES_POSTGRES_SINK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connectors/connector.h"
#include "connectors/postgres/postgres_connection.h"
#include "spdlog/logger.h"
#include "weir/operator.h"
#include "weir/postgres.h"
#include "weir/two_phase_commit.h"
#include "weir/write_ahead.h"

namespace weir::connectors {

inline constexpr char kPostgresSinkConnector[] = "postgres-sink";

// How long a sink tries to get a lost connection back before its task
// fails.
inline constexpr absl::Duration kPostgresReconnectTimeout = absl::Seconds(10);

// A postgres-sink vertex's properties, parsed and checked.
struct PostgresSinkConfig {
  std::string conninfo;
  std::string table;
  std::vector<std::string> columns;
  std::string create_table;  // column definitions, or empty
  postgres::Strategy strategy = postgres::Strategy::kTwoPhaseCommit;
  std::string transaction_prefix;
  int batch_rows = 1000;
  std::vector<std::string> key_columns;  // upsert only

  // kInvalidArgument naming the property that is missing or malformed.
  // Contacts nothing.
  static absl::StatusOr<PostgresSinkConfig> FromProperties(const Properties& properties);
};

// What the three sinks share: the connection, the COPY of buffered rows, the
// table's creation, names for messages.
class PostgresRowWriter {
 public:
  PostgresRowWriter(PostgresSinkConfig config, std::string client);

  // Connects `*connection` (replacing a broken one); throws with the
  // server's words when it cannot.
  void Connect(std::unique_ptr<PostgresConnection>* connection) const;
  // Connects, retrying with backoff until kPostgresReconnectTimeout passes;
  // throws then.
  void Reconnect(std::unique_ptr<PostgresConnection>* connection) const;
  // CREATE TABLE IF NOT EXISTS, when the config asks for it.
  void CreateTable(PostgresConnection& connection) const;
  // Adds `row` to the buffer; true when it holds batch.rows rows.
  bool Add(const postgres::Row& row);
  // Sends the buffered rows with one COPY and empties the buffer; the
  // buffer stays when it fails.
  absl::Status Flush(PostgresConnection& connection);
  size_t buffered_rows() const { return rows_; }
  void Discard();

  const PostgresSinkConfig& config() const { return config_; }
  const std::string& client() const { return client_; }
  // Throws std::runtime_error "<client>: <status>".
  [[noreturn]] void Throw(const absl::Status& status) const;

 private:
  const PostgresSinkConfig config_;
  const std::string client_;
  const std::string copy_statement_;
  std::string buffer_;
  size_t rows_ = 0;
};

class PostgresAtLeastOnceSink : public weir::StreamOperator {
 public:
  explicit PostgresAtLeastOnceSink(PostgresSinkConfig config);

  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::postgres::Row*.
  void Process(void* record) override;
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void EndInput() override;
  // Sends what is buffered.
  void OnIdle() override;
  void Close() override;

 private:
  // Sends the buffer, reconnecting and sending again when the connection
  // broke; throws when that does not work out.
  void Flush();

  PostgresSinkConfig config_;
  std::optional<PostgresRowWriter> writer_;
  std::unique_ptr<PostgresConnection> connection_;
};

// The statements of the upsert strategy, apart so that unit tests can read
// them. Identifiers are double-quoted in lower case, which is what the
// unquoted names of the other strategies and of create.table mean.
struct PostgresUpsertStatements {
  explicit PostgresUpsertStatements(const PostgresSinkConfig& config);

  // Creates the session's staging table (once per connection).
  std::string create_staging;
  // COPY ... FROM STDIN into the staging table: a sequence number (the
  // order in which rows came), then the columns.
  std::string copy;
  // From the staging table into the table, the last row per key.
  std::string upsert;
};

class PostgresUpsertSink : public weir::StreamOperator {
 public:
  explicit PostgresUpsertSink(PostgresSinkConfig config);

  // Connects, creates the table if asked to, and checks that the table has
  // a unique constraint on the key columns (UnrecoverableError otherwise:
  // no restart helps).
  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::postgres::Row*.
  void Process(void* record) override;
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void EndInput() override;
  // Sends what is buffered.
  void OnIdle() override;
  void Close() override;

 private:
  struct Pending {
    uint64_t sequence = 0;
    postgres::Row row;
  };
  // The staging table and the check of the key, on a new connection.
  absl::Status PrepareConnection();
  // One transaction: COPY into staging, upsert, COMMIT.
  absl::Status SendBatch();
  // SendBatch, reconnecting and sending again when the connection broke;
  // throws when that does not work out. Empties the buffer.
  void Flush();
  [[noreturn]] void Throw(const absl::Status& status) const;

  const PostgresSinkConfig config_;
  const PostgresUpsertStatements statements_;
  std::vector<size_t> key_indexes_;
  std::string client_;
  std::optional<PostgresRowWriter> writer_;  // connects
  std::unique_ptr<PostgresConnection> connection_;
  std::vector<Pending> pending_;
  absl::flat_hash_map<std::string, size_t> pending_by_key_;  // encoded key -> index in pending_
  uint64_t sequence_ = 0;
  std::string copy_buffer_;
  Counter* rows_metric_ = nullptr;
  Counter* batches_metric_ = nullptr;
};

class PostgresTwoPhaseCommitSink : public weir::TwoPhaseCommitSink<postgres::Row, std::string> {
 public:
  explicit PostgresTwoPhaseCommitSink(PostgresSinkConfig config);

  void Open(const SinkContext& context) override;
  void BeginTransaction() override;
  void Write(const postgres::Row& row) override;
  // The transaction's name (gid).
  std::string PreCommit(int64_t checkpoint_id) override;
  void Commit(const std::string& gid) override;
  void CommitOnRecovery(const std::string& gid) override;
  void Abort() override;
  void AbortLingering(int old_subtask, const std::vector<std::string>& restored) override;
  void Close() override;

 private:
  // COMMIT PREPARED `gid` on the committer connection. A transaction that
  // does not exist was committed before when `absent_is_committed` (or when
  // an earlier try lost its connection); otherwise it is lost output and
  // this throws weir::UnrecoverableError.
  void CommitPrepared(const std::string& gid, bool absent_is_committed);
  std::string GidPrefix(int subtask) const;

  PostgresSinkConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  std::optional<PostgresRowWriter> writer_;
  int subtask_ = 0;
  int parallelism_ = 1;
  bool lingering_done_ = false;
  std::unique_ptr<PostgresConnection> connection_;  // writes the open transaction
  std::unique_ptr<PostgresConnection> committer_;   // COMMIT / ROLLBACK PREPARED
  Counter* committed_metric_ = nullptr;
  Counter* recovery_commits_metric_ = nullptr;
  Counter* rolled_back_metric_ = nullptr;
};

class PostgresWriteAheadSink : public weir::WriteAheadSink<postgres::Row> {
 public:
  explicit PostgresWriteAheadSink(PostgresSinkConfig config);

  void Open(const SinkContext& context) override;
  // Marks the batch written in the transaction of its last COPY.
  void WriteBatch(const WriteAheadBatch& batch, const std::vector<postgres::Row>& rows) override;
  bool IsWritten(const WriteAheadBatch& batch) override;
  void ForgetWritten() override;
  void Close() override;

 private:
  PostgresSinkConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  std::optional<PostgresRowWriter> writer_;
  std::unique_ptr<PostgresConnection> connection_;
  Counter* batches_metric_ = nullptr;
  int64_t batches_written_ = 0;
};

class PostgresSinkConnector final : public Connector {
 public:
  Kind kind() const override { return Kind::kSink; }
  absl::Status Validate(const Properties& properties) const override;
  // two-phase-commit and write-ahead: the transaction prefix.
  std::optional<ExclusiveNameClaim> ExclusiveName(const Properties& properties) const override;
  absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const Properties& properties) const override;
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_POSTGRES_POSTGRES_SINK_H_
