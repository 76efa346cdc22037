#include "connectors/kafka/protocol/transaction_client.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/retry/backoff.h"
#include "common/status_macros.h"

namespace weir::connectors::kafka_protocol {
namespace {

// A connection whose broker's API versions are known.
struct Session {
  std::unique_ptr<BrokerConnection> connection;
  ApiVersionsResponse versions;
};

// `status` with `context` in front of its message, payloads (the Kafka error
// code) kept.
absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  absl::Status annotated = Annotate(status, context);
  status.ForEachPayload([&](absl::string_view type_url, const absl::Cord& payload) {
    annotated.SetPayload(type_url, payload);
  });
  return annotated;
}

// Retried by EndTransaction: connection trouble, and the Kafka errors that
// pass (wrapped as kUnavailable with their code attached).
bool IsRetriable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable;
}

// Each pause between retries is drawn from its upper half: the subtasks of
// an exactly-once sink recover together and call the same coordinator.
constexpr double kRetryJitter = 0.5;

absl::Status RetriableKafkaError(int16_t code, absl::string_view context) {
  return WithKafkaErrorCode(
      absl::UnavailableError(absl::StrCat(context, ": ", DescribeKafkaError(code))), code);
}

// A response that does not decode, or does not answer our request, is the
// broker's (or a non-broker's) fault; it is not retried. Never kDataLoss: that
// code is kept for lost transactions.
absl::Status Malformed(const BrokerConnection& connection, const absl::Status& status) {
  return absl::InternalError(absl::StrCat("invalid answer from ", connection.address().ToString(),
                                          ": ", status.message()));
}

absl::Status CheckCorrelation(const BrokerConnection& connection, absl::string_view api,
                              int32_t sent, int32_t received) {
  if (sent == received) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(connection.address().ToString(), " answered the ", api,
                                          " request with correlation id ", received,
                                          "; expected ", sent));
}

// Sends `request` (encoded by `encode` with the next correlation id) and
// decodes its answer with `decode`.
template <typename Response, typename Encode, typename Decode>
absl::StatusOr<Response> Exchange(BrokerConnection& connection, absl::string_view api,
                                  int16_t version, const std::string& client_id,
                                  absl::Time deadline, Encode encode, Decode decode) {
  const RequestHeader header{version, connection.NextCorrelationId(), client_id};
  ASSIGN_OR_RETURN(const std::string request, encode(header));
  ASSIGN_OR_RETURN(const std::string frame, connection.RoundTrip(request, deadline));
  absl::StatusOr<Response> response = decode(version, frame);
  if (!response.ok()) return Malformed(connection, response.status());
  RETURN_IF_ERROR(CheckCorrelation(connection, api, header.correlation_id,
                                   response->correlation_id));
  return response;
}

absl::StatusOr<ApiVersionsResponse> RequestApiVersions(BrokerConnection& connection,
                                                       int16_t version,
                                                       const std::string& client_id,
                                                       absl::Time deadline) {
  return Exchange<ApiVersionsResponse>(connection, "ApiVersions", version, client_id, deadline,
                                       EncodeApiVersionsRequest, DecodeApiVersionsResponse);
}

// Connects to `address` and asks which API versions it supports (a broker
// too old or too new for our newest ApiVersions version answers
// UNSUPPORTED_VERSION with its own range, and we ask again in that).
absl::StatusOr<Session> OpenSession(const BrokerAddress& address, const std::string& client_id,
                                    absl::Time deadline) {
  Session session;
  ASSIGN_OR_RETURN(session.connection, BrokerConnection::Connect(address, deadline));
  ASSIGN_OR_RETURN(session.versions, RequestApiVersions(*session.connection,
                                                        kApiVersionsVersions.max, client_id,
                                                        deadline));
  if (session.versions.error_code == kUnsupportedVersion) {
    const std::optional<VersionRange> theirs = session.versions.VersionsOf(kApiVersionsKey);
    const std::optional<int16_t> version =
        theirs ? HighestCommonVersion(kApiVersionsVersions, *theirs) : std::nullopt;
    if (!version) {
      return WithKafkaErrorCode(
          absl::UnimplementedError(absl::StrCat(address.ToString(),
                                                " supports no ApiVersions version this client "
                                                "speaks (v",
                                                kApiVersionsVersions.min, "-v",
                                                kApiVersionsVersions.max, ")")),
          kUnsupportedVersion);
    }
    ASSIGN_OR_RETURN(session.versions,
                     RequestApiVersions(*session.connection, *version, client_id, deadline));
  }
  if (session.versions.error_code != kNone) {
    return WithKafkaErrorCode(
        absl::UnknownError(absl::StrCat(address.ToString(), " answered ApiVersions with ",
                                        DescribeKafkaError(session.versions.error_code))),
        session.versions.error_code);
  }
  return session;
}

// The version of `api_key` to send to the broker of `session`.
absl::StatusOr<int16_t> NegotiateVersion(const Session& session, absl::string_view api,
                                         int16_t api_key, VersionRange ours,
                                         absl::string_view why) {
  const std::optional<VersionRange> theirs = session.versions.VersionsOf(api_key);
  const std::string where = session.connection->address().ToString();
  if (!theirs) {
    return absl::UnimplementedError(absl::StrCat(where, " does not support ", api));
  }
  const std::optional<int16_t> version = HighestCommonVersion(ours, *theirs);
  if (!version) {
    return absl::UnimplementedError(absl::StrCat(where, " supports ", api, " v", theirs->min, "-v",
                                                 theirs->max, "; this client sends only v",
                                                 ours.min, "-v", ours.max, why));
  }
  return *version;
}

// `what` is what the principal may not use: "this transactional id", "this
// group or topic".
absl::Status AuthorizationError(int16_t code, absl::string_view context,
                                absl::string_view what = "this transactional id") {
  return WithKafkaErrorCode(
      absl::PermissionDeniedError(absl::StrCat(context, ": ", DescribeKafkaError(code),
                                               ": the client's principal may not use ", what,
                                               " (or the cluster)")),
      code);
}

// A coordinator's error code `api`'s answer should never carry.
absl::Status UnexpectedAnswer(int16_t code, absl::string_view context, absl::string_view api) {
  return WithKafkaErrorCode(absl::UnknownError(absl::StrCat(context, ": ", DescribeKafkaError(code),
                                                            ": unexpected answer to ", api)),
                            code);
}

// What one request at the coordinator came to: the call's result (kDone),
// or an error that may pass, to retry at the same coordinator (kRetry) or
// after finding the coordinator again (kFindAgain).
struct Attempt {
  enum class Next { kDone, kRetry, kFindAgain };
  Next next = Next::kDone;
  absl::Status status;

  static Attempt Done(absl::Status status) { return {Next::kDone, std::move(status)}; }
};

// How a coordinator's error code that every coordinator request may get is
// retried; nullopt for the codes the request itself decides on.
std::optional<Attempt::Next> RetryOfCoordinatorError(int16_t code) {
  switch (code) {
    case kCoordinatorLoadInProgress:
    case kConcurrentTransactions:
    case kRequestTimedOut:
      // The same coordinator will answer once it is ready.
      return Attempt::Next::kRetry;
    case kCoordinatorNotAvailable:
    case kNotCoordinator:
    case kNetworkException:
      // The coordinator moved (or is moving): find it again.
      return Attempt::Next::kFindAgain;
    default:
      return std::nullopt;
  }
}

// A final or retried Attempt for a status from exchanging a request with
// the coordinator (connection trouble is retried with a new connection).
Attempt AttemptOfExchangeError(const absl::Status& status, absl::string_view at) {
  if (IsRetriable(status)) return {Attempt::Next::kFindAgain, WithContext(status, at)};
  return Attempt::Done(WithContext(status, at));
}

// One call that needs the coordinator of a key (a transactional id or a
// group): find it, send the call's request there, and retry what may pass
// until the deadline. `read_only` calls log their progress at debug instead
// of info.
class CoordinatorCall {
 public:
  // `attempt(coordinator, exchange_deadline, at)` sends the request once;
  // `at` names the call and the coordinator for messages.
  using AttemptFn =
      absl::FunctionRef<Attempt(Session& coordinator, absl::Time exchange_deadline,
                                const std::string& at)>;

  CoordinatorCall(const std::vector<BrokerAddress>& bootstrap_servers,
                  const TransactionClientOptions& options, std::string key, int8_t key_type,
                  std::string what, bool read_only)
      : bootstrap_servers_(bootstrap_servers),
        options_(options),
        key_(std::move(key)),
        key_type_(key_type),
        log_(options.logger.get()),
        what_(std::move(what)),
        progress_level_(read_only ? spdlog::level::debug : spdlog::level::info) {}

  absl::Status Run(AttemptFn attempt) {
    if (log_ != nullptr) {
      log_->log(progress_level_, "{} via {}", what_, bootstrap_servers_.front().ToString());
    }
    deadline_ = absl::Now() + options_.deadline;

    std::optional<Session> coordinator;
    size_t next_bootstrap = 0;
    int attempts = 0;
    // The last try's status is the call's answer (done, or an error no
    // retry fixes), not an error to wait out.
    bool answered = false;
    const retry::RetryOutcome outcome = retry::Retry(
        {.backoff = {.initial = options_.retry_backoff,
                     .multiplier = 2,
                     .max = options_.max_retry_backoff,
                     .jitter = kRetryJitter},
         .deadline = deadline_},
        [&]() -> absl::Status {
          ++attempts;
          answered = false;
          if (!coordinator) {
            const BrokerAddress& bootstrap = bootstrap_servers_[next_bootstrap++ % bootstrap_servers_.size()];
            absl::StatusOr<Session> found = FindCoordinator(bootstrap);
            if (!found.ok()) {
              answered = !IsRetriable(found.status());
              return answered ? WithContext(found.status(), what_) : found.status();
            }
            coordinator = std::move(*found);
          }
          const std::string at =
              absl::StrCat(what_, " at coordinator ", coordinator->connection->address().ToString());
          Attempt result = attempt(*coordinator, ExchangeDeadline(), at);
          switch (result.next) {
            case Attempt::Next::kDone:
              answered = true;
              if (result.status.ok() && log_ != nullptr) {
                log_->log(progress_level_, "{}: done (attempt {})", at, attempts);
              }
              break;
            case Attempt::Next::kRetry:
              break;
            case Attempt::Next::kFindAgain:
              coordinator.reset();
              break;
          }
          return std::move(result.status);
        },
        [&](const absl::Status&) { return !answered; },
        [&](const absl::Status& error, absl::Duration wait) {
          if (log_ != nullptr) {
            log_->debug("{}: retrying in {} after: {}", what_, absl::FormatDuration(wait),
                        std::string(error.message()));
          }
        });
    if (outcome.status.ok()) return absl::OkStatus();
    if (outcome.end != retry::RetryOutcome::End::kDeadline) return Finish(outcome.status);
    absl::Status status = absl::UnavailableError(
        absl::StrCat(what_, ": no result within the deadline of ", absl::FormatDuration(options_.deadline), " (",
                     outcome.Summary(), "); last error: ", outcome.status.message()));
    if (const std::optional<int16_t> code = KafkaErrorCodeOf(outcome.status)) {
      status = WithKafkaErrorCode(std::move(status), *code);
    }
    return Finish(std::move(status));
  }

 private:
  // Bounds one exchange, and never beyond the call's deadline.
  absl::Time ExchangeDeadline() const {
    return std::min(deadline_, absl::Now() + options_.request_timeout);
  }

  // Asks `bootstrap` for the coordinator of the key and returns a session
  // with it (the bootstrap's own when it is the one).
  absl::StatusOr<Session> FindCoordinator(const BrokerAddress& bootstrap) const {
    ASSIGN_OR_RETURN(Session session,
                     OpenSession(bootstrap, options_.client_id, ExchangeDeadline()));
    ASSIGN_OR_RETURN(const int16_t version,
                     NegotiateVersion(session, "FindCoordinator", kFindCoordinatorKey,
                                      kFindCoordinatorVersions, ""));
    const FindCoordinatorRequest find{key_, key_type_};
    ASSIGN_OR_RETURN(
        const FindCoordinatorResponse found,
        Exchange<FindCoordinatorResponse>(
            *session.connection, "FindCoordinator", version, options_.client_id,
            ExchangeDeadline(),
            [&](const RequestHeader& header) { return EncodeFindCoordinatorRequest(header, find); },
            DecodeFindCoordinatorResponse));
    const std::string context = absl::StrCat(
        "finding the ", key_type_ == kCoordinatorTypeGroup ? "group" : "transaction",
        " coordinator through ", bootstrap.ToString());
    switch (found.error_code) {
      case kNone:
        break;
      case kCoordinatorLoadInProgress:
      case kCoordinatorNotAvailable:
      case kNotCoordinator:
      case kRequestTimedOut:
        return RetriableKafkaError(found.error_code, context);
      case kTransactionalIdAuthorizationFailed:
      case kClusterAuthorizationFailed:
        return AuthorizationError(found.error_code, context);
      case kGroupAuthorizationFailed:
        return AuthorizationError(found.error_code, context, "this group");
      default:
        return WithKafkaErrorCode(
            absl::UnknownError(absl::StrCat(
                context, ": ", DescribeKafkaError(found.error_code),
                found.error_message ? absl::StrCat(": ", *found.error_message) : "")),
            found.error_code);
    }
    if (found.port < 1 || found.port > 65535 || found.host.empty()) {
      return absl::InternalError(absl::StrCat(context, ": the answer names coordinator '",
                                              found.host, ":", found.port, "'"));
    }
    const BrokerAddress coordinator{found.host, found.port};
    if (coordinator == bootstrap) return session;
    return OpenSession(coordinator, options_.client_id, ExchangeDeadline());
  }

  // Logs a final failure at warn. Whether a commit that found its
  // transaction no longer open lost records is the caller's verdict (the
  // exactly-once sink reads the id's outcome marker), so the client does
  // not log it as an error.
  absl::Status Finish(absl::Status status) const {
    if (log_ != nullptr) log_->warn("{}", status.ToString());
    return status;
  }

  const std::vector<BrokerAddress>& bootstrap_servers_;
  const TransactionClientOptions& options_;
  const std::string key_;
  const int8_t key_type_;
  spdlog::logger* const log_;
  const std::string what_;
  const spdlog::level::level_enum progress_level_;
  absl::Time deadline_;
};

}  // namespace

absl::Status EndTxnResultToStatus(int16_t error_code, bool committed, absl::string_view context) {
  const std::string error = absl::StrCat(context, ": ", DescribeKafkaError(error_code), ": ");
  auto result = [&](absl::StatusCode code, absl::string_view meaning) {
    return WithKafkaErrorCode(absl::Status(code, absl::StrCat(error, meaning)), error_code);
  };
  switch (error_code) {
    case kNone:
      return absl::OkStatus();
    case kInvalidTxnState:
      if (committed) {
        return result(absl::StatusCode::kDataLoss,
                      "the transaction is no longer open and was not committed: most likely "
                      "the broker aborted it (transaction.timeout.ms passed, e.g. while the job "
                      "was down) or it was aborted explicitly; its records are lost");
      }
      return result(absl::StatusCode::kFailedPrecondition,
                    "the transaction is no longer open: most likely it was already committed; "
                    "nothing was aborted");
    case kInvalidProducerEpoch:
    case kProducerFenced:
      if (committed) {
        return result(absl::StatusCode::kDataLoss,
                      "the producer epoch is no longer current: the transactional id was "
                      "initialized again since (after this transaction committed, or by a "
                      "producer that aborted it), or the broker aborted the transaction on "
                      "timeout (transaction.timeout.ms) and bumped the epoch");
      }
      return result(absl::StatusCode::kFailedPrecondition,
                    "the producer epoch is no longer current: the broker already ended this "
                    "transaction (on timeout) or a newer producer took the transactional id "
                    "over; nothing was aborted");
    case kInvalidProducerIdMapping:
    case kUnknownProducerId:
    case kTransactionalIdNotFound:
      if (committed) {
        return result(absl::StatusCode::kDataLoss,
                      "the broker has no transaction of this producer id under this "
                      "transactional id (it expired after transactional.id.expiration.ms, or "
                      "the id was initialized again with another producer id); this commit "
                      "cannot commit it");
      }
      return result(absl::StatusCode::kFailedPrecondition,
                    "the broker has no transaction of this producer id under this "
                    "transactional id; nothing was aborted");
    case kTransactionAbortable:
      return result(committed ? absl::StatusCode::kDataLoss : absl::StatusCode::kUnknown,
                    "the broker allows only an abort of this transaction; it was not committed "
                    "and its records are lost");
    case kTransactionalIdAuthorizationFailed:
    case kClusterAuthorizationFailed:
      return AuthorizationError(error_code, context);
    case kUnsupportedVersion:
      return result(absl::StatusCode::kUnimplemented,
                    "the broker refused the EndTxn version it advertised");
    default:
      return result(absl::StatusCode::kUnknown, "unexpected answer to EndTxn");
  }
}

absl::Status CheckTransactionRecoverySupported(
    const std::map<std::string, std::string>& kafka_properties) {
  const auto it = kafka_properties.find("security.protocol");
  if (it == kafka_properties.end()) return absl::OkStatus();
  const std::string protocol = absl::AsciiStrToLower(absl::StripAsciiWhitespace(it->second));
  if (protocol == "plaintext") return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "kafka.security.protocol=", it->second,
      ": the exactly-once Kafka sink cannot recover its pre-committed transactions over TLS or "
      "SASL yet (its recovery commit speaks plaintext only); use plaintext or the "
      "at-least-once guarantee"));
}

absl::StatusOr<TransactionClient> TransactionClient::Create(absl::string_view bootstrap_servers,
                                                            TransactionClientOptions options) {
  ASSIGN_OR_RETURN(std::vector<BrokerAddress> servers, ParseBootstrapServers(bootstrap_servers));
  if (options.client_id.empty()) {
    return absl::InvalidArgumentError("TransactionClient: client_id is empty");
  }
  if (options.request_timeout <= absl::ZeroDuration() || options.deadline <= absl::ZeroDuration() ||
      options.retry_backoff <= absl::ZeroDuration() ||
      options.max_retry_backoff < options.retry_backoff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TransactionClient: request_timeout (", absl::FormatDuration(options.request_timeout),
        "), deadline (", absl::FormatDuration(options.deadline), ") and retry_backoff (",
        absl::FormatDuration(options.retry_backoff),
        ") must be positive and max_retry_backoff (",
        absl::FormatDuration(options.max_retry_backoff), ") at least retry_backoff"));
  }
  return TransactionClient(std::move(servers), std::move(options));
}

absl::Status TransactionClient::CommitTransaction(const std::string& transactional_id,
                                                  int64_t producer_id,
                                                  int16_t producer_epoch) const {
  return EndTransaction(EndTxnRequest{transactional_id, producer_id, producer_epoch, true});
}

absl::Status TransactionClient::AbortTransaction(const std::string& transactional_id,
                                                 int64_t producer_id,
                                                 int16_t producer_epoch) const {
  return EndTransaction(EndTxnRequest{transactional_id, producer_id, producer_epoch, false});
}

absl::Status TransactionClient::EndTransaction(const EndTxnRequest& request) const {
  const std::string what = absl::StrCat(request.committed ? "committing" : "aborting",
                                        " transaction '", request.transactional_id,
                                        "' (producer id ", request.producer_id, ", epoch ",
                                        request.producer_epoch, ")");
  if (request.transactional_id.empty() || request.producer_id < 0 || request.producer_epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs a transactional id, a producer id >= 0 and an epoch >= 0"));
  }
  CoordinatorCall call(bootstrap_servers_, options_, request.transactional_id,
                       kCoordinatorTypeTransaction, what, /*read_only=*/false);
  return call.Run([&](Session& coordinator, absl::Time exchange_deadline, const std::string& at) {
    absl::StatusOr<int16_t> version =
        NegotiateVersion(coordinator, "EndTxn", kEndTxnKey, kEndTxnVersions,
                         " (v5+ would change the transaction semantics)");
    if (!version.ok()) return Attempt::Done(WithContext(version.status(), at));
    absl::StatusOr<EndTxnResponse> response = Exchange<EndTxnResponse>(
        *coordinator.connection, "EndTxn", *version, options_.client_id, exchange_deadline,
        [&](const RequestHeader& header) { return EncodeEndTxnRequest(header, request); },
        DecodeEndTxnResponse);
    if (!response.ok()) return AttemptOfExchangeError(response.status(), at);
    const int16_t code = response->error_code;
    if (const std::optional<Attempt::Next> retry = RetryOfCoordinatorError(code)) {
      return Attempt{*retry, RetriableKafkaError(code, at)};
    }
    return Attempt::Done(EndTxnResultToStatus(code, request.committed, at));
  });
}

absl::StatusOr<std::optional<CommittedOffset>> TransactionClient::FetchCommittedOffset(
    const std::string& group, const std::string& topic, int32_t partition) const {
  const std::string what = absl::StrCat("fetching the offset group '", group,
                                        "' committed on ", topic, "-", partition);
  if (group.empty() || topic.empty() || partition < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs a group, a topic and a partition >= 0"));
  }
  const OffsetFetchRequest request{group, {{topic, {partition}}}};
  std::optional<CommittedOffset> result;
  CoordinatorCall call(bootstrap_servers_, options_, group, kCoordinatorTypeGroup, what,
                       /*read_only=*/true);
  RETURN_IF_ERROR(call.Run([&](Session& coordinator, absl::Time exchange_deadline,
                               const std::string& at) {
    absl::StatusOr<int16_t> version = NegotiateVersion(coordinator, "OffsetFetch",
                                                       kOffsetFetchKey, kOffsetFetchVersions, "");
    if (!version.ok()) return Attempt::Done(WithContext(version.status(), at));
    absl::StatusOr<OffsetFetchResponse> response = Exchange<OffsetFetchResponse>(
        *coordinator.connection, "OffsetFetch", *version, options_.client_id, exchange_deadline,
        [&](const RequestHeader& header) { return EncodeOffsetFetchRequest(header, request); },
        DecodeOffsetFetchResponse);
    if (!response.ok()) return AttemptOfExchangeError(response.status(), at);
    // v2+ reports group and coordinator errors once, at the top; v1 in
    // every partition.
    int16_t code = response->error_code;
    const OffsetFetchResponse::Partition* answer = nullptr;
    for (const OffsetFetchResponse::Topic& t : response->topics) {
      for (const OffsetFetchResponse::Partition& p : t.partitions) {
        if (t.name == topic && p.partition_index == partition) answer = &p;
      }
    }
    if (code == kNone) {
      if (answer == nullptr) {
        return Attempt::Done(absl::InternalError(
            absl::StrCat(at, ": the answer does not list ", topic, "-", partition)));
      }
      code = answer->error_code;
    }
    if (const std::optional<Attempt::Next> retry = RetryOfCoordinatorError(code)) {
      return Attempt{*retry, RetriableKafkaError(code, at)};
    }
    switch (code) {
      case kNone:
        if (answer->committed_offset >= 0) {
          result = CommittedOffset{answer->committed_offset, answer->metadata.value_or("")};
        } else {
          result.reset();
        }
        return Attempt::Done(absl::OkStatus());
      case kGroupIdNotFound:
        // A group the coordinator does not know has committed nothing.
        result.reset();
        return Attempt::Done(absl::OkStatus());
      case kUnstableOffsetCommit:
        // Only with require_stable, which this client never sets; should a
        // broker send it anyway, the pending commit ends soon.
        return Attempt{Attempt::Next::kRetry, RetriableKafkaError(code, at)};
      case kGroupAuthorizationFailed:
      case kTopicAuthorizationFailed:
        return Attempt::Done(AuthorizationError(code, at, "this group or topic"));
      default:
        return Attempt::Done(UnexpectedAnswer(code, at, "OffsetFetch"));
    }
  }));
  return result;
}

absl::StatusOr<TransactionDescription> TransactionClient::DescribeTransaction(
    const std::string& transactional_id) const {
  const std::string what = absl::StrCat("describing transactional id '", transactional_id, "'");
  if (transactional_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs a transactional id"));
  }
  const DescribeTransactionsRequest request{{transactional_id}};
  TransactionDescription result;
  CoordinatorCall call(bootstrap_servers_, options_, transactional_id,
                       kCoordinatorTypeTransaction, what, /*read_only=*/true);
  RETURN_IF_ERROR(call.Run([&](Session& coordinator, absl::Time exchange_deadline,
                               const std::string& at) {
    absl::StatusOr<int16_t> version =
        NegotiateVersion(coordinator, "DescribeTransactions", kDescribeTransactionsKey,
                         kDescribeTransactionsVersions, "");
    if (!version.ok()) return Attempt::Done(WithContext(version.status(), at));
    absl::StatusOr<DescribeTransactionsResponse> response =
        Exchange<DescribeTransactionsResponse>(
            *coordinator.connection, "DescribeTransactions", *version, options_.client_id,
            exchange_deadline,
            [&](const RequestHeader& header) {
              return EncodeDescribeTransactionsRequest(header, request);
            },
            DecodeDescribeTransactionsResponse);
    if (!response.ok()) return AttemptOfExchangeError(response.status(), at);
    const DescribeTransactionsResponse::TransactionState* state = nullptr;
    for (const DescribeTransactionsResponse::TransactionState& s :
         response->transaction_states) {
      if (s.transactional_id == transactional_id) state = &s;
    }
    if (state == nullptr) {
      return Attempt::Done(
          absl::InternalError(absl::StrCat(at, ": the answer does not describe the id")));
    }
    const int16_t code = state->error_code;
    if (const std::optional<Attempt::Next> retry = RetryOfCoordinatorError(code)) {
      return Attempt{*retry, RetriableKafkaError(code, at)};
    }
    switch (code) {
      case kNone:
        result.found = true;
        result.state = state->state;
        result.producer_id = state->producer_id;
        result.producer_epoch = state->producer_epoch;
        result.timeout_ms = state->timeout_ms;
        return Attempt::Done(absl::OkStatus());
      case kTransactionalIdNotFound:
        result = TransactionDescription{};
        return Attempt::Done(absl::OkStatus());
      case kTransactionalIdAuthorizationFailed:
      case kClusterAuthorizationFailed:
        return Attempt::Done(AuthorizationError(code, at));
      default:
        return Attempt::Done(UnexpectedAnswer(code, at, "DescribeTransactions"));
    }
  }));
  return result;
}

}  // namespace weir::connectors::kafka_protocol
