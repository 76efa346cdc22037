// The built-in "mysql-sink" connector: weir::mysql::Row values into one
// table of a MySQL or MariaDB database through libmariadb, as idempotent
// upserts by primary key (weir/mysql.h says what that guarantees;
// docs/exactly-once.md compares it with the other strategies).
//
// MySqlUpsertSink buffers rows and sends batch.rows of them as one
// transaction of INSERT ... VALUES (...), (...) ON DUPLICATE KEY UPDATE
// c = VALUES(c) statements (a statement holds at most about 1 MiB of SQL;
// rows of one key in a statement apply in order, so the last one stays),
// at every barrier, at the end of input and when the input runs dry. A lost
// connection is reconnected (with backoff, up to kMySqlReconnectTimeout)
// and the batch sent again, which changes nothing the first try committed;
// a deadlock or lock wait timeout sends it again too. Values go in as
// string literals escaped by the connection (mysql_real_escape_string);
// identifiers are checked (letters, digits, '_') and quoted with backticks.
//
// At Open the table is created when create.table says so, and the sink
// checks that a unique key of the table covers exactly the key columns:
// without one, ON DUPLICATE KEY UPDATE would append rows, so the task fails
// (not restarted) saying what to add.
//
// Properties (written by weir::mysql::Sink): host, port, user,
// password.file or password.env (read on the TaskManager when connecting),
// database, table, columns and key.columns (comma-separated), batch.rows,
// guarantee (at-least-once), and optionally create.table.
//
// Thread-safety: one task thread calls every method (weir/operator.h).
#ifndef WEIR_CONNECTORS_MYSQL_MYSQL_SINK_H_
#define WEIR_CONNECTORS_MYSQL_MYSQL_SINK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connectors/connector.h"
#include "connectors/sink_connector.h"
#include "connectors/mysql/mysql_connection.h"
#include "weir/mysql.h"
#include "weir/operator.h"

namespace weir::connectors {

inline constexpr char kMySqlSinkConnector[] = "mysql-sink";

// How long the sink tries to get a lost connection back before its task
// fails.
inline constexpr absl::Duration kMySqlReconnectTimeout = absl::Seconds(10);

// A mysql-sink vertex's properties, parsed and checked.
struct MySqlSinkConfig {
  std::string host;
  int port = 3306;
  std::string user;
  std::string password_file;
  std::string password_env;
  std::string database;
  std::string table;
  std::vector<std::string> columns;
  std::vector<std::string> key_columns;
  std::string create_table;
  int batch_rows = 1000;

  // kInvalidArgument naming the property that is missing or malformed.
  // Contacts nothing and reads no file.
  static absl::StatusOr<MySqlSinkConfig> FromProperties(const Properties& properties);
  // The password from password.file or password.env ("" when neither is
  // set); kFailedPrecondition when the file cannot be read or the variable
  // is unset.
  absl::StatusOr<std::string> ReadPassword() const;
};

// The SQL the sink sends, apart so that unit tests can read it.
struct MySqlUpsertStatements {
  explicit MySqlUpsertStatements(const MySqlSinkConfig& config);

  // "INSERT INTO `t` (`a`, `b`) VALUES "; the rows follow.
  std::string insert_head;
  // " ON DUPLICATE KEY UPDATE `b` = VALUES(`b`)" (a key column set to itself
  // when every column is a key).
  std::string on_duplicate;
  // CREATE TABLE IF NOT EXISTS, or empty.
  std::string create_table;
};

class MySqlUpsertSink : public weir::StreamOperator {
 public:
  explicit MySqlUpsertSink(MySqlSinkConfig config);

  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::mysql::Row*.
  void Process(void* record) override;
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void EndInput() override;
  // Sends what is buffered.
  void OnIdle() override;
  void Close() override;

 private:
  // Connects (once, or retrying with backoff until kMySqlReconnectTimeout
  // when `retry`); throws when it cannot.
  void Connect(bool retry);
  // Checks that a unique key of the table is exactly the key columns.
  void CheckKey();
  // One transaction of the buffered rows.
  absl::Status SendBatch();
  // SendBatch, reconnecting and sending again when the connection broke;
  // throws when that does not work out. Empties the buffer.
  void Flush();
  [[noreturn]] void Throw(const absl::Status& status) const;

  const MySqlSinkConfig config_;
  const MySqlUpsertStatements statements_;
  std::string client_;
  std::string password_;
  std::unique_ptr<MySqlConnection> connection_;
  std::vector<mysql::Row> pending_;
  std::string sql_;
  Counter* rows_metric_ = nullptr;
  Counter* batches_metric_ = nullptr;
};

class MySqlSinkConnector final : public ConfiguredSinkConnector<MySqlSinkConfig, MySqlUpsertSink> {};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_MYSQL_MYSQL_SINK_H_
