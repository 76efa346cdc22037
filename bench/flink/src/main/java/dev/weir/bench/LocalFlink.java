package dev.weir.bench;

import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/** What the bench jobs share: a local cluster set up alike, and the same Kafka sink. */
final class LocalFlink {
  private LocalFlink() {}

  /**
   * A local cluster in this process with PARALLELISM slots, RocksDB state with incremental
   * checkpoints into CHECKPOINT_DIR, every CHECKPOINT_MS (0: off).
   */
  static StreamExecutionEnvironment environment(int parallelism, long checkpointMs, String checkpointDir) {
    Configuration config = new Configuration();
    config.setString("state.backend.type", "rocksdb");
    config.setString("execution.checkpointing.dir", "file://" + checkpointDir);
    config.setString("execution.checkpointing.incremental", "true");
    if (checkpointMs > 0) config.setString("execution.checkpointing.interval", checkpointMs + " ms");
    config.setString("taskmanager.numberOfTaskSlots", Integer.toString(parallelism));
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(config);
    env.setParallelism(parallelism);
    return env;
  }

  /** An at-least-once sink into TOPIC with the idempotent producer, as Weir's bench jobs write. */
  static <T> KafkaSink<T> atLeastOnceSink(
      String bootstrap, String topic, SerializationSchema<T> key, SerializationSchema<T> value) {
    return KafkaSink.<T>builder()
        .setBootstrapServers(bootstrap)
        .setRecordSerializer(
            KafkaRecordSerializationSchema.<T>builder()
                .setTopic(topic)
                .setKeySerializationSchema(key)
                .setValueSerializationSchema(value)
                .build())
        .setDeliveryGuarantee(DeliveryGuarantee.AT_LEAST_ONCE)
        .setProperty("acks", "all")
        .setProperty("enable.idempotence", "true")
        .build();
  }
}
