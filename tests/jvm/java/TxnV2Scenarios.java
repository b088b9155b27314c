// Kafka's Java producer, unmodified, through transactions as a user runs them: commits, aborts, offsets in a
// transaction, a second producer with the same transactional.id (fencing), and a broker killed in the middle
// of a transaction. Run against chronolog and against Kafka 4.4, the JSON lines it prints must be the same.
// Whether the producer runs transaction version 2 (KIP-890 part 2) is read from its TransactionManager.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnV2Scenarios {
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        try {
            switch (args[1]) {
                case "basic" -> basic(args[2], args[3]);
                case "crash" -> crash(args[2]);
                default -> throw new IllegalArgumentException(args[1]);
            }
            emit("done", true);
        } catch (Throwable e) {
            java.io.StringWriter trace = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(trace));
            emit("error", trace.toString());
        }
        System.out.flush();
        System.exit(0);
    }

    /** Commit with offsets, abort, commit, then a second producer fencing the first mid-transaction. */
    static void basic(String topic, String group) throws Exception {
        String id = "tv2-" + topic;
        KafkaProducer<String, String> first = transactional(id);
        first.initTransactions();
        long start = epoch(first);
        emit("step", "init", "tv2", tv2(first));
        first.beginTransaction();
        send(first, topic, "a", 0, 10);
        first.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(5)),
                                       new ConsumerGroupMetadata(group));
        first.commitTransaction();
        emit("step", "commit", "tv2", tv2(first), "epoch", epoch(first) - start);
        first.beginTransaction();
        send(first, topic, "b", 0, 10);
        first.flush();
        first.abortTransaction();
        emit("step", "abort", "epoch", epoch(first) - start);
        first.beginTransaction();
        first.abortTransaction();  // nothing sent: the producer may skip EndTxn
        emit("step", "empty abort", "epoch", epoch(first) - start);
        first.beginTransaction();
        send(first, topic, "c", 0, 5);
        first.commitTransaction();
        emit("step", "commit again", "epoch", epoch(first) - start);

        first.beginTransaction();
        send(first, topic, "zombie", 0, 3);
        first.flush();
        KafkaProducer<String, String> second = transactional(id);
        second.initTransactions();  // aborts the first's open transaction and fences it
        emit("step", "second init", "epoch", epoch(second) - start);
        String fenced;
        try {
            first.commitTransaction();
            fenced = "committed";
        } catch (Exception e) {
            fenced = e.getClass().getSimpleName();
        }
        emit("step", "zombie commit", "result", fenced);
        first.close(Duration.ofSeconds(5));
        second.beginTransaction();
        send(second, topic, "d", 0, 4);
        second.commitTransaction();
        emit("step", "second commit", "epoch", epoch(second) - start);
        second.close();

        emit("step", "read", "values", readCommitted(topic, 2), "committed", committed(group, topic));
    }

    /** A transaction sent and flushed, the broker SIGKILLed and restarted (the test does it between the
     *  "sent" line and the line it writes to stdin), then committed; and one more transaction after it. */
    static void crash(String topic) throws Exception {
        KafkaProducer<String, String> p = transactional("crash-" + topic);
        p.initTransactions();
        long start = epoch(p);
        p.beginTransaction();
        send(p, topic, "x", 0, 10);
        p.flush();
        emit("step", "sent", "tv2", tv2(p));
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        String result;
        try {
            p.commitTransaction();
            result = "committed";
        } catch (Exception e) {
            result = e.getClass().getSimpleName();
        }
        emit("step", "commit after restart", "result", result, "epoch", epoch(p) - start);
        p.beginTransaction();
        send(p, topic, "y", 0, 5);
        p.commitTransaction();
        emit("step", "next commit", "epoch", epoch(p) - start);
        p.close();
        emit("step", "read", "values", readCommitted(topic, 2));
    }

    // -- helpers ------------------------------------------------------------------------------------------
    static KafkaProducer<String, String> transactional(String id) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("transactional.id", id);
        p.put("transaction.timeout.ms", "60000");
        p.put("max.block.ms", "120000");
        p.put("delivery.timeout.ms", "120000");
        p.put("request.timeout.ms", "20000");
        return new KafkaProducer<>(p);
    }

    static void send(KafkaProducer<String, String> p, String topic, String prefix, int from, int to) {
        for (int i = from; i < to; i++) p.send(new ProducerRecord<>(topic, i % 2, prefix, prefix + i));
    }

    static Object manager(KafkaProducer<String, String> p) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        return f.get(p);
    }

    /** TransactionManager.isTransactionV2Enabled: the producer saw transaction.version 2 finalized. */
    static boolean tv2(KafkaProducer<String, String> p) throws Exception {
        Object tm = manager(p);
        return (Boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
    }

    /** The producer's current epoch (TransactionManager.producerIdAndEpoch). */
    static long epoch(KafkaProducer<String, String> p) throws Exception {
        Object tm = manager(p);
        Field f = tm.getClass().getDeclaredField("producerIdAndEpoch");
        f.setAccessible(true);
        Object pe = f.get(tm);
        return ((Number) pe.getClass().getField("epoch").get(pe)).longValue();
    }

    static List<String> readCommitted(String topic, int partitions) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("isolation.level", "read_committed");
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);  // read_committed: the LSO
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp) >= ends.get(tp);
                if (done) break;
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) values.add(r.value());
            }
        }
        Collections.sort(values);
        return values;
    }

    static Object committed(String group, String topic) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata om = offsets.get(new TopicPartition(topic, 0));
            return om == null ? null : om.offset();
        }
    }

    static synchronized void emit(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        StringBuilder sb = new StringBuilder();
        json(sb, m);
        System.out.println(sb);
        System.out.flush();
    }

    @SuppressWarnings("unchecked")
    static void json(StringBuilder sb, Object o) {
        if (o == null) sb.append("null");
        else if (o instanceof String s) {
            sb.append('"');
            for (char ch : s.toCharArray()) {
                if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
                else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                else sb.append(ch);
            }
            sb.append('"');
        } else if (o instanceof Number || o instanceof Boolean) sb.append(o);
        else if (o instanceof Map<?, ?> m) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof List<?> l) {
            sb.append('[');
            for (int i = 0; i < l.size(); i++) {
                if (i > 0) sb.append(',');
                json(sb, l.get(i));
            }
            sb.append(']');
        } else json(sb, o.toString());
    }
}
