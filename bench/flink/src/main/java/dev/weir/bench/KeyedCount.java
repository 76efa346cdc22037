package dev.weir.bench;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Weir's keyed_count example on Flink: counts the records of each distinct value
 * of a Kafka topic in keyed state and writes (value, count so far) for every record
 * to another topic, at-least-once. Bounded: it stops at the offsets the topic had
 * when it started. Runs in a local cluster in this process.
 *
 * <p>Arguments: BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC PARALLELISM CHECKPOINT_MS CHECKPOINT_DIR
 * (CHECKPOINT_MS 0: checkpoints off). Prints "elapsed_seconds S" on standard output
 * when the job has finished; the checkpoint coordinator's lines go to standard error.
 */
public final class KeyedCount {
  /** The count of the current key, one value per key. */
  static final class CountPerKey extends KeyedProcessFunction<String, String, Tuple2<String, Long>> {
    private transient ValueState<Long> count;

    @Override
    public void open(org.apache.flink.api.common.functions.OpenContext context) {
      count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Long.class));
    }

    @Override
    public void processElement(String value, Context ctx, Collector<Tuple2<String, Long>> out) throws Exception {
      Long n = count.value();
      long next = n == null ? 1 : n + 1;
      count.update(next);
      out.collect(Tuple2.of(value, next));
    }
  }

  /** The record's key: the counted value. */
  static final class CountKey implements SerializationSchema<Tuple2<String, Long>> {
    @Override
    public byte[] serialize(Tuple2<String, Long> t) {
      return t.f0.getBytes(StandardCharsets.UTF_8);
    }
  }

  /** The record's value: the count in decimal. */
  static final class CountValue implements SerializationSchema<Tuple2<String, Long>> {
    @Override
    public byte[] serialize(Tuple2<String, Long> t) {
      return Long.toString(t.f1).getBytes(StandardCharsets.UTF_8);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println("usage: KeyedCount BOOTSTRAP INPUT OUTPUT PARALLELISM CHECKPOINT_MS CHECKPOINT_DIR");
      System.exit(2);
    }
    final String bootstrap = args[0], input = args[1], output = args[2];
    final int parallelism = Integer.parseInt(args[3]);
    final long checkpointMs = Long.parseLong(args[4]);

    StreamExecutionEnvironment env = LocalFlink.environment(parallelism, checkpointMs, args[5]);

    KafkaSource<String> source =
        KafkaSource.<String>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId("flink-keyed-count-" + System.nanoTime())
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setBounded(OffsetsInitializer.latest())
            .setDeserializer(KafkaRecordDeserializationSchema.valueOnly(StringDeserializer.class))
            .build();
    DataStream<String> values = env.fromSource(source, WatermarkStrategy.noWatermarks(), "KafkaSource");
    DataStream<Tuple2<String, Long>> counts =
        values.keyBy(v -> v).process(new CountPerKey()).name("CountPerKey");
    KafkaSink<Tuple2<String, Long>> sink = LocalFlink.atLeastOnceSink(bootstrap, output, new CountKey(), new CountValue());
    counts.sinkTo(sink).name("KafkaSink");

    final long start = System.nanoTime();
    env.execute("keyed_count");
    System.out.printf("elapsed_seconds %.3f%n", (System.nanoTime() - start) / 1e9);
  }
}
