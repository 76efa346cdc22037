// TransactionClient: commits or aborts a Kafka transaction by transactional
// id, producer id and epoch, without the producer that opened it. This is
// what the exactly-once Kafka sink needs after a crash to finish a
// transaction its checkpoint pre-committed: librdkafka cannot resume another
// process's transaction (its init_transactions aborts it), so this client
// speaks the requests it needs itself — ApiVersions, FindCoordinator (key
// type 1, transaction) and EndTxn — over plaintext TCP. Two read-only calls
// let the sink find out what became of a transaction it cannot commit: the
// offset a consumer group committed (FindCoordinator key type 0, then
// OffsetFetch), which a transaction's send_offsets_to_transaction makes
// visible exactly when the transaction commits, and the transaction
// coordinator's view of a transactional id (DescribeTransactions).
//
// EndTxn goes out at the highest version <= 4 that the broker supports, the
// classic transaction semantics librdkafka also gets; never v5+ (KIP-890 part
// 2), under which the broker would bump the epoch on every transaction.
//
// What the answers mean: committing a committed transaction again is OK
// (EndTxn is idempotent). For a commit, INVALID_TXN_STATE, an epoch error
// (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED) or an unknown producer id mapping
// mean the transaction is not open at that producer id and epoch: the
// broker aborted it (transaction.timeout.ms passed while the job was down),
// or it was committed and the id initialized again since, or a later
// producer of the id aborted it: kDataLoss, as seen from this call. Callers
// tell the cause apart (KafkaErrorCodeOf; the exactly-once sink also reads
// the id's outcome marker, kafka_transactional_sink.h).
//
// Thread-safety: thread-safe. The client is immutable after Create; every
// call opens its own connections and closes them before it returns, so calls
// may run at the same time from any threads (with a thread-safe logger, as
// spdlog's *_mt loggers are). A call blocks its thread for up to the deadline.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "connectors/kafka/protocol/broker_connection.h"
#include "connectors/kafka/protocol/kafka_codec.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "spdlog/logger.h"

namespace weir::connectors::kafka_protocol {

struct TransactionClientOptions {
  // client.id sent with every request; brokers log it. Default
  // "weir-transaction-client".
  std::string client_id = "weir-transaction-client";
  // Bounds one exchange with one broker: connecting, sending a request and
  // receiving its response. Default 10 s.
  absl::Duration request_timeout = absl::Seconds(10);
  // Bounds one call (CommitTransaction, AbortTransaction,
  // FetchCommittedOffset, DescribeTransaction), retries included. Default
  // 60 s.
  absl::Duration deadline = absl::Seconds(60);
  // Pause before the first retry; it doubles with every retry up to
  // max_retry_backoff, and each pause is shortened at random by up to half
  // (equal jitter). Defaults 50 ms and 1 s.
  absl::Duration retry_backoff = absl::Milliseconds(50);
  absl::Duration max_retry_backoff = absl::Seconds(1);
  // Where the client logs what it does (each commit and abort at info, the
  // read-only calls and retries at debug, failures at warn — data loss
  // too, which is the caller's verdict). nullptr: no logging.
  std::shared_ptr<spdlog::logger> logger;
};

// The offset a consumer group committed on one partition, and the metadata
// string committed with it ("" when none).
struct CommittedOffset {
  int64_t offset = -1;
  std::string metadata;
};

// The transaction coordinator's view of one transactional id.
struct TransactionDescription {
  // false: TRANSACTIONAL_ID_NOT_FOUND (the broker does not know the id; the
  // other fields keep their defaults).
  bool found = false;
  // The broker's state name: "Empty", "Ongoing", "PrepareCommit",
  // "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
  // "PrepareEpochFence", ...
  std::string state;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t timeout_ms = 0;
};

class TransactionClient {
 public:
  // `bootstrap_servers` is "host:port[,host:port...]" (ParseBootstrapServers).
  // kInvalidArgument for a malformed list or options (empty client id,
  // non-positive timeouts). Contacts no broker.
  static absl::StatusOr<TransactionClient> Create(absl::string_view bootstrap_servers,
                                                  TransactionClientOptions options = {});

  // Commits the transaction that `producer_id` / `producer_epoch` opened
  // under `transactional_id`. Retries, with backoff until the deadline,
  // what may pass: connection errors, COORDINATOR_LOAD_IN_PROGRESS,
  // COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR (finding the coordinator
  // again), CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT. Returns:
  //   OK                   committed now, or already committed before.
  //   kDataLoss            INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH,
  //                        PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
  //                        UNKNOWN_PRODUCER_ID, TRANSACTIONAL_ID_NOT_FOUND,
  //                        TRANSACTION_ABORTABLE: the transaction was not and
  //                        will not be committed; most likely the broker
  //                        aborted it on timeout.
  //   kPermissionDenied    an authorization error.
  //   kUnimplemented       no EndTxn / FindCoordinator version in common.
  //   kUnavailable         the deadline passed while retrying; the message
  //                        holds the last error. Try again later.
  //   kInvalidArgument     bad arguments (empty id, negative pid or epoch).
  //   kInternal            a broker answered bytes that are not a valid
  //                        response.
  //   kUnknown             any other Kafka error.
  // Every status decided by a broker's error code carries that code —
  // KafkaErrorCodeOf(status), and "NAME (code)" in the message — and so does
  // kUnavailable when the last retried error was a Kafka error code.
  absl::Status CommitTransaction(const std::string& transactional_id, int64_t producer_id,
                                 int16_t producer_epoch) const;

  // Aborts it; the same retries and results as CommitTransaction, except
  // that INVALID_TXN_STATE (most likely: already committed), the epoch errors
  // and the unknown producer id errors are kFailedPrecondition: nothing was
  // aborted, and no data was lost by this call.
  absl::Status AbortTransaction(const std::string& transactional_id, int64_t producer_id,
                                int16_t producer_epoch) const;

  // The offset `group` has committed on `topic` partition `partition`:
  // FindCoordinator (key type 0, group), then OffsetFetch at the highest
  // version both speak in v1-v5. Without require_stable (v7+), so an open
  // transaction's pending offset commit neither blocks the answer nor shows
  // in it: the answer is the last offset committed outside a transaction or
  // by a committed one. nullopt when the group has no offset there (or the
  // coordinator knows no such group). Retries as CommitTransaction does.
  // kPermissionDenied for GROUP_AUTHORIZATION_FAILED or
  // TOPIC_AUTHORIZATION_FAILED; kUnimplemented, kUnavailable, kInternal,
  // kUnknown and kInvalidArgument as there.
  absl::StatusOr<std::optional<CommittedOffset>> FetchCommittedOffset(
      const std::string& group, const std::string& topic, int32_t partition) const;

  // The transaction coordinator's view of `transactional_id`:
  // FindCoordinator (key type 1), then DescribeTransactions v0. found=false
  // for TRANSACTIONAL_ID_NOT_FOUND. Read-only: it neither creates the id nor
  // changes its state. Retries as CommitTransaction does. kUnimplemented when
  // the broker lacks DescribeTransactions (before Kafka 3.0);
  // kPermissionDenied, kUnavailable, kInternal, kUnknown and
  // kInvalidArgument as there.
  absl::StatusOr<TransactionDescription> DescribeTransaction(
      const std::string& transactional_id) const;

  const std::vector<BrokerAddress>& bootstrap_servers() const { return bootstrap_servers_; }

 private:
  TransactionClient(std::vector<BrokerAddress> bootstrap_servers, TransactionClientOptions options)
      : bootstrap_servers_(std::move(bootstrap_servers)), options_(std::move(options)) {}

  absl::Status EndTransaction(const EndTxnRequest& request) const;

  std::vector<BrokerAddress> bootstrap_servers_;
  TransactionClientOptions options_;
};

// The status for a broker's final EndTxn answer `error_code` (not one of the
// retried ones) to a commit (`committed`) or an abort, as listed at
// CommitTransaction; `context` starts the message ("committing transaction
// 't' (producer id 7, epoch 0) at 127.0.0.1:9092"). The code is attached
// (KafkaErrorCodeOf). Exposed for tests; TransactionClient uses it.
absl::Status EndTxnResultToStatus(int16_t error_code, bool committed, absl::string_view context);

// Whether the exactly-once recovery commit can work with a Kafka sink's
// client properties (its kafka.* properties, without the prefix): OK for
// plaintext (security.protocol unset or "plaintext", any case);
// kUnimplemented naming the property for ssl, sasl_plaintext and sasl_ssl,
// because TransactionClient speaks neither TLS nor SASL yet.
absl::Status CheckTransactionRecoverySupported(
    const std::map<std::string, std::string>& kafka_properties);

}  // namespace weir::connectors::kafka_protocol

