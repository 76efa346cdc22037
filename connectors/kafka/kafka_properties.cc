#include "connectors/kafka/kafka_properties.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace weir::connectors {
namespace {

using Kind = KafkaPropertySpec::Kind;

constexpr int64_t kInt32Max = 2147483647;
// Inline PEM keys and certificate chains are the longest legitimate values.
constexpr size_t kMaxStringValue = 64 * 1024;

// Sorted by name (checked by a unit test). Left out on purpose: every
// property that names a file or directory (*.location, ssl.keystore.*,
// ssl.crl.location, sasl.kerberos.keytab, offset.store.path), loads code
// (plugin.library.paths, ssl.engine.*, ssl.providers), runs a command
// (sasl.kerberos.kinit.cmd), and the ones Weir sets itself. Also left out:
// Kerberos (runs kinit) and OAUTHBEARER/OIDC (Debian's librdkafka is built
// without it).
constexpr std::array kAllowed = {
    KafkaPropertySpec{"acks", Kind::kInt, -1, 1000},
    KafkaPropertySpec{"allow.auto.create.topics", Kind::kBool},
    KafkaPropertySpec{"api.version.request", Kind::kBool},
    KafkaPropertySpec{"api.version.request.timeout.ms", Kind::kInt, 1, 300000},
    KafkaPropertySpec{"batch.num.messages", Kind::kInt, 1, 1000000},
    KafkaPropertySpec{"batch.size", Kind::kInt, 1, kInt32Max},
    KafkaPropertySpec{"broker.address.family", Kind::kEnum, 0, 0, "any,v4,v6"},
    KafkaPropertySpec{"broker.address.ttl", Kind::kInt, 0, 86400000},
    KafkaPropertySpec{"check.crcs", Kind::kBool},
    KafkaPropertySpec{"client.id", Kind::kString},
    KafkaPropertySpec{"client.rack", Kind::kString},
    KafkaPropertySpec{"compression.codec", Kind::kEnum, 0, 0, "none,gzip,snappy,lz4,zstd"},
    KafkaPropertySpec{"compression.level", Kind::kInt, -1, 12},
    KafkaPropertySpec{"compression.type", Kind::kEnum, 0, 0, "none,gzip,snappy,lz4,zstd"},
    KafkaPropertySpec{"connections.max.idle.ms", Kind::kInt, 0, kInt32Max},
    KafkaPropertySpec{"debug", Kind::kFlags, 0, 0,
                      "generic,broker,topic,metadata,feature,queue,msg,protocol,cgrp,security,"
                      "fetch,interceptor,plugin,consumer,admin,eos,mock,assignor,conf,all"},
    KafkaPropertySpec{"delivery.timeout.ms", Kind::kInt, 0, kInt32Max},
    KafkaPropertySpec{"enable.ssl.certificate.verification", Kind::kBool},
    KafkaPropertySpec{"fetch.error.backoff.ms", Kind::kInt, 0, 300000},
    KafkaPropertySpec{"fetch.max.bytes", Kind::kInt, 0, 2147483135},
    KafkaPropertySpec{"fetch.message.max.bytes", Kind::kInt, 1, 1000000000},
    KafkaPropertySpec{"fetch.min.bytes", Kind::kInt, 1, 100000000},
    KafkaPropertySpec{"fetch.wait.max.ms", Kind::kInt, 0, 300000},
    KafkaPropertySpec{"linger.ms", Kind::kFloat, 0, 900000},
    KafkaPropertySpec{"log.connection.close", Kind::kBool},
    KafkaPropertySpec{"max.in.flight", Kind::kInt, 1, 1000000},
    KafkaPropertySpec{"max.in.flight.requests.per.connection", Kind::kInt, 1, 1000000},
    KafkaPropertySpec{"max.partition.fetch.bytes", Kind::kInt, 1, 1000000000},
    KafkaPropertySpec{"message.copy.max.bytes", Kind::kInt, 0, 1000000000},
    KafkaPropertySpec{"message.max.bytes", Kind::kInt, 1000, 1000000000},
    KafkaPropertySpec{"message.timeout.ms", Kind::kInt, 0, kInt32Max},
    KafkaPropertySpec{"metadata.max.age.ms", Kind::kInt, 1, 86400000},
    KafkaPropertySpec{"partitioner", Kind::kEnum, 0, 0,
                      "random,consistent,consistent_random,murmur2,murmur2_random,fnv1a,"
                      "fnv1a_random"},
    KafkaPropertySpec{"queue.buffering.backpressure.threshold", Kind::kInt, 1, 1000000},
    KafkaPropertySpec{"queue.buffering.max.kbytes", Kind::kInt, 1, kInt32Max},
    KafkaPropertySpec{"queue.buffering.max.messages", Kind::kInt, 0, kInt32Max},
    KafkaPropertySpec{"queue.buffering.max.ms", Kind::kFloat, 0, 900000},
    KafkaPropertySpec{"queued.max.messages.kbytes", Kind::kInt, 1, 2097151},
    KafkaPropertySpec{"queued.min.messages", Kind::kInt, 1, 10000000},
    KafkaPropertySpec{"receive.message.max.bytes", Kind::kInt, 1000, kInt32Max},
    KafkaPropertySpec{"reconnect.backoff.max.ms", Kind::kInt, 0, 3600000},
    KafkaPropertySpec{"reconnect.backoff.ms", Kind::kInt, 0, 3600000},
    KafkaPropertySpec{"request.required.acks", Kind::kInt, -1, 1000},
    KafkaPropertySpec{"request.timeout.ms", Kind::kInt, 1, 900000},
    KafkaPropertySpec{"retry.backoff.ms", Kind::kInt, 1, 300000},
    KafkaPropertySpec{"sasl.mechanism", Kind::kEnum, 0, 0,
                      "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"},
    KafkaPropertySpec{"sasl.mechanisms", Kind::kEnum, 0, 0,
                      "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"},
    KafkaPropertySpec{"sasl.password", Kind::kString},
    KafkaPropertySpec{"sasl.username", Kind::kString},
    KafkaPropertySpec{"security.protocol", Kind::kEnum, 0, 0,
                      "plaintext,ssl,sasl_plaintext,sasl_ssl"},
    KafkaPropertySpec{"socket.connection.setup.timeout.ms", Kind::kInt, 1000, kInt32Max},
    KafkaPropertySpec{"socket.keepalive.enable", Kind::kBool},
    KafkaPropertySpec{"socket.max.fails", Kind::kInt, 0, 1000000},
    KafkaPropertySpec{"socket.nagle.disable", Kind::kBool},
    KafkaPropertySpec{"socket.receive.buffer.bytes", Kind::kInt, 0, 100000000},
    KafkaPropertySpec{"socket.send.buffer.bytes", Kind::kInt, 0, 100000000},
    KafkaPropertySpec{"socket.timeout.ms", Kind::kInt, 10, 300000},
    KafkaPropertySpec{"ssl.ca.pem", Kind::kString},
    KafkaPropertySpec{"ssl.certificate.pem", Kind::kString},
    KafkaPropertySpec{"ssl.cipher.suites", Kind::kString},
    KafkaPropertySpec{"ssl.curves.list", Kind::kString},
    KafkaPropertySpec{"ssl.endpoint.identification.algorithm", Kind::kEnum, 0, 0, "none,https"},
    KafkaPropertySpec{"ssl.key.password", Kind::kString},
    KafkaPropertySpec{"ssl.key.pem", Kind::kString},
    KafkaPropertySpec{"ssl.sigalgs.list", Kind::kString},
    KafkaPropertySpec{"sticky.partitioning.linger.ms", Kind::kInt, 0, 900000},
    KafkaPropertySpec{"topic.metadata.propagation.max.ms", Kind::kInt, 0, 3600000},
    KafkaPropertySpec{"topic.metadata.refresh.fast.interval.ms", Kind::kInt, 1, 60000},
    KafkaPropertySpec{"topic.metadata.refresh.interval.ms", Kind::kInt, -1, 3600000},
    KafkaPropertySpec{"topic.metadata.refresh.sparse", Kind::kBool},
    KafkaPropertySpec{"transaction.timeout.ms", Kind::kInt, 1000, kInt32Max},
};

const KafkaPropertySpec* FindSpec(absl::string_view name) {
  auto it = std::lower_bound(kAllowed.begin(), kAllowed.end(), name,
                             [](const KafkaPropertySpec& s, absl::string_view n) { return s.name < n; });
  return it != kAllowed.end() && it->name == name ? &*it : nullptr;
}

bool InList(absl::string_view list, absl::string_view value) {
  for (absl::string_view v : absl::StrSplit(list, ',')) {
    if (v == value) return true;
  }
  return false;
}

absl::Status CheckValue(const KafkaPropertySpec& spec, absl::string_view value) {
  switch (spec.kind) {
    case Kind::kInt: {
      int64_t n = 0;
      // librdkafka takes "all" for acks = -1.
      if ((spec.name == "acks" || spec.name == "request.required.acks") && value == "all") {
        return absl::OkStatus();
      }
      if (!absl::SimpleAtoi(value, &n) || n < spec.min_value || n > spec.max_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected an integer in ", spec.min_value, "..", spec.max_value));
      }
      return absl::OkStatus();
    }
    case Kind::kFloat: {
      double d = 0;
      if (!absl::SimpleAtod(value, &d) || !std::isfinite(d) ||
          d < static_cast<double>(spec.min_value) || d > static_cast<double>(spec.max_value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected a number in ", spec.min_value, "..", spec.max_value));
      }
      return absl::OkStatus();
    }
    case Kind::kBool:
      if (value == "true" || value == "false") return absl::OkStatus();
      return absl::InvalidArgumentError("expected true or false");
    case Kind::kEnum:
      if (InList(spec.values, value)) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("expected one of ", spec.values));
    case Kind::kFlags:
      for (absl::string_view flag : absl::StrSplit(value, ',')) {
        if (!InList(spec.values, absl::StripAsciiWhitespace(flag))) {
          return absl::InvalidArgumentError(
              absl::StrCat("expected comma-separated flags from ", spec.values));
        }
      }
      return absl::OkStatus();
    case Kind::kString:
      if (value.size() > kMaxStringValue) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected at most ", kMaxStringValue, " bytes"));
      }
      return absl::OkStatus();
  }
  return absl::InternalError("unknown property kind");
}

}  // namespace

KafkaPropertyPolicy KafkaPropertyPolicy::FromList(absl::string_view comma_separated) {
  KafkaPropertyPolicy policy;
  for (absl::string_view name : absl::StrSplit(comma_separated, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (!name.empty()) policy.extra_allowed.emplace(name);
  }
  return policy;
}

std::span<const KafkaPropertySpec> JobSettableKafkaProperties() { return kAllowed; }

absl::Status CheckJobKafkaProperty(absl::string_view connector, absl::string_view name,
                                   absl::string_view value, const KafkaPropertyPolicy& policy) {
  if (const KafkaPropertySpec* spec = FindSpec(name)) {
    absl::Status valid = CheckValue(*spec, value);
    if (valid.ok()) return valid;
    return absl::InvalidArgumentError(absl::StrCat(connector, ": property 'kafka.", name, "' = '",
                                                   value.substr(0, 200), "' is not valid: ",
                                                   valid.message()));
  }
  if (policy.extra_allowed.count(std::string(name)) > 0) {
    if (value.size() > kMaxStringValue) {
      return absl::InvalidArgumentError(absl::StrCat(connector, ": property 'kafka.", name,
                                                     "' is longer than ", kMaxStringValue,
                                                     " bytes"));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      connector, ": property 'kafka.", name,
      "' is not one of the librdkafka properties a job may set (tuning, client identity and "
      "inline SASL/TLS settings; nothing that names a file, a library or a command). If it "
      "is a librdkafka property and every job submitter may run code on this cluster, an "
      "operator can allow it in the cluster configuration: security.kafka.allowed-properties: ",
      name));
}

}  // namespace weir::connectors
