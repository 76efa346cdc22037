package dev.weir.bench;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Weir's bench/jobs/nexmark.cc on Flink, with the same plan in the DataStream API: the
 * events of bench/nexmark (CSV values, the Kafka timestamp as event time, no
 * out-of-orderness), bounded, written to another topic at-least-once.
 *
 * <p>q0 every event unchanged; q1 bids with the price in euros (x 0.908); q2 bids on
 * auctions whose id is a multiple of 123; q5 bids per auction over sliding windows of 10 s
 * every 2 s, then per window the auctions with the most bids ("end,auction,count").
 *
 * <p>Arguments: BOOTSTRAP INPUT OUTPUT PARALLELISM CHECKPOINT_MS CHECKPOINT_DIR QUERY
 * (CHECKPOINT_MS 0: off). Prints "elapsed_seconds S", "cpu_seconds C" (this JVM's) and
 * "peak_rss_kb K" on standard output at the end; the checkpoint coordinator's lines go to
 * standard error.
 */
public final class Nexmark {
  /** Key and value of a Kafka record, as strings. */
  static final class KeyValue implements KafkaRecordDeserializationSchema<Tuple2<String, String>> {
    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Tuple2<String, String>> out) {
      String key = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
      out.collect(Tuple2.of(key, new String(record.value(), StandardCharsets.UTF_8)));
    }

    @Override
    public TypeInformation<Tuple2<String, String>> getProducedType() {
      return Types.TUPLE(Types.STRING, Types.STRING);
    }
  }

  static final class KeyOf implements SerializationSchema<Tuple2<String, String>> {
    @Override
    public byte[] serialize(Tuple2<String, String> t) {
      return t.f0.getBytes(StandardCharsets.UTF_8);
    }
  }

  static final class ValueOf implements SerializationSchema<Tuple2<String, String>> {
    @Override
    public byte[] serialize(Tuple2<String, String> t) {
      return t.f1.getBytes(StandardCharsets.UTF_8);
    }
  }

  static String field(String line, int i) {
    int start = 0;
    for (int k = 0; k < i; ++k) start = line.indexOf(',', start) + 1;
    int end = line.indexOf(',', start);
    return end < 0 ? line.substring(start) : line.substring(start, end);
  }

  static boolean isBid(Tuple2<String, String> e) {
    return !e.f1.isEmpty() && e.f1.charAt(0) == 'B';
  }

  /** Counts a window's bids. */
  static final class Count implements AggregateFunction<Tuple2<String, String>, Long, Long> {
    @Override
    public Long createAccumulator() {
      return 0L;
    }

    @Override
    public Long add(Tuple2<String, String> bid, Long n) {
      return n + 1;
    }

    @Override
    public Long getResult(Long n) {
      return n;
    }

    @Override
    public Long merge(Long a, Long b) {
      return a + b;
    }
  }

  /** (auction, window end, count). */
  static final class WithWindow extends ProcessWindowFunction<Long, Tuple3<Long, Long, Long>, Long, TimeWindow> {
    @Override
    public void process(Long auction, Context ctx, Iterable<Long> counts, Collector<Tuple3<Long, Long, Long>> out) {
      out.collect(Tuple3.of(auction, ctx.window().getEnd(), counts.iterator().next()));
    }
  }

  /** The auctions with the most bids of one window end. */
  static final class Hottest
      extends ProcessWindowFunction<Tuple3<Long, Long, Long>, Tuple2<String, String>, Long, TimeWindow> {
    @Override
    public void process(Long end, Context ctx, Iterable<Tuple3<Long, Long, Long>> all,
        Collector<Tuple2<String, String>> out) {
      long most = 0;
      for (Tuple3<Long, Long, Long> c : all) most = Math.max(most, c.f2);
      List<Long> hottest = new ArrayList<>();
      for (Tuple3<Long, Long, Long> c : all) {
        if (c.f2 == most) hottest.add(c.f0);
      }
      Collections.sort(hottest);
      for (long auction : hottest) out.collect(Tuple2.of(end.toString(), end + "," + auction + "," + most));
    }
  }

  static DataStream<Tuple2<String, String>> query(String query, DataStream<Tuple2<String, String>> events) {
    switch (query) {
      case "q0":
        return events.map(e -> e).returns(Types.TUPLE(Types.STRING, Types.STRING));
      case "q1":
        return events
            .filter(Nexmark::isBid)
            .map(e -> Tuple2.of(e.f0, field(e.f1, 1) + "," + field(e.f1, 2) + ","
                + (Long.parseLong(field(e.f1, 3)) * 908 / 1000) + "," + field(e.f1, 5)))
            .returns(Types.TUPLE(Types.STRING, Types.STRING));
      case "q2":
        return events
            .filter(e -> isBid(e) && Long.parseLong(field(e.f1, 1)) % 123 == 0)
            .map(e -> Tuple2.of(e.f0, field(e.f1, 1) + "," + field(e.f1, 3)))
            .returns(Types.TUPLE(Types.STRING, Types.STRING));
      case "q5":
        return events
            .filter(Nexmark::isBid)
            .keyBy(e -> Long.parseLong(field(e.f1, 1)), Types.LONG)
            .window(SlidingEventTimeWindows.of(Duration.ofSeconds(10), Duration.ofSeconds(2)))
            .aggregate(new Count(), new WithWindow(), Types.LONG, Types.LONG,
                Types.TUPLE(Types.LONG, Types.LONG, Types.LONG))
            .name("BidsPerAuction")
            .keyBy(c -> c.f1, Types.LONG)
            .window(TumblingEventTimeWindows.of(Duration.ofSeconds(2)))
            .process(new Hottest(), Types.TUPLE(Types.STRING, Types.STRING))
            .name("HotItems");
      default:
        throw new IllegalArgumentException("query " + query + ": expected q0, q1, q2 or q5");
    }
  }

  static long peakRssKb() throws Exception {
    for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
      if (line.startsWith("VmHWM:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
    }
    return -1;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 7 || args.length > 9) {
      System.err.println(
          "usage: Nexmark BOOTSTRAP INPUT OUTPUT PARALLELISM CHECKPOINT_MS CHECKPOINT_DIR QUERY [WATERMARK_INTERVAL_MS [MAX_DRIFT_MS]]");
      System.exit(2);
    }
    final String bootstrap = args[0], input = args[1], output = args[2];
    final int parallelism = Integer.parseInt(args[3]);
    final long checkpointMs = Long.parseLong(args[4]);

    StreamExecutionEnvironment env = LocalFlink.environment(parallelism, checkpointMs, args[5]);
    // Flink's default (200 ms) unless given (0: the default).
    if (args.length >= 8 && Long.parseLong(args[7]) > 0) {
      env.getConfig().setAutoWatermarkInterval(Long.parseLong(args[7]));
    }
    // Watermark alignment, as the Weir job's (0: off).
    final long maxDriftMs = args.length >= 9 ? Long.parseLong(args[8]) : 0;

    KafkaSource<Tuple2<String, String>> source =
        KafkaSource.<Tuple2<String, String>>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId("flink-nexmark-" + System.nanoTime())
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setBounded(OffsetsInitializer.latest())
            .setDeserializer(new KeyValue())
            .build();
    // The Kafka timestamp is the event time; events are in order.
    WatermarkStrategy<Tuple2<String, String>> watermarks =
        WatermarkStrategy.<Tuple2<String, String>>forBoundedOutOfOrderness(Duration.ZERO);
    if (maxDriftMs > 0) watermarks = watermarks.withWatermarkAlignment("nexmark", Duration.ofMillis(maxDriftMs));
    DataStream<Tuple2<String, String>> events = env.fromSource(source, watermarks, "KafkaSource");
    KafkaSink<Tuple2<String, String>> sink = LocalFlink.atLeastOnceSink(bootstrap, output, new KeyOf(), new ValueOf());
    query(args[6], events).sinkTo(sink).name("KafkaSink");

    final long start = System.nanoTime();
    env.execute("nexmark-" + args[6]);
    System.out.printf("elapsed_seconds %.3f%n", (System.nanoTime() - start) / 1e9);
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    System.out.printf("cpu_seconds %.3f%n", os.getProcessCpuTime() / 1e9);
    System.out.printf("peak_rss_kb %d%n", peakRssKb());
  }
}
