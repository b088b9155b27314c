// Kafka's Java KafkaShareConsumer (KIP-932), unmodified, through the scenarios a user of share groups runs:
// several members of one group sharing a topic, explicit and implicit acknowledgement, records released,
// rejected, renewed or left to their lock's expiry. One JVM runs every member on a thread of its own and
// prints JSON lines tagged with the member, which the Python test reads.
// Args: bootstrap spec... where a spec is "tag;scenario;arg;arg..." and the scenarios are
//   config;group;name=value,...        set group configs (Admin.incrementalAlterConfigs on the GROUP resource)
//   member;topic;group;mode;plan;idleMs;maxMs
//       a share consumer (mode: implicit or explicit) polling until no record came for idleMs after one
//       did (or maxMs in all). plan: comma-separated "value-suffix=action" for the first delivery of a
//       record whose value ends with the suffix: release; reject; release-always (at every delivery);
//       renew (RENEW, accepted when delivered again); stall (sleep the plan's "stallMs=", past the lock,
//       then ACCEPT); close (close the consumer right after acquiring it). Also in the plan: after=TAG
//       (join only once member TAG closed) and pauseAfter=N (once N records were delivered and
//       acknowledged, print a pause line and wait for a line on stdin). Every delivery is a line, and
//       every failed acknowledgement.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareScenarios {
    static String bootstrap;
    static final ThreadLocal<String> TAG = new ThreadLocal<>();

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        // configs first, before any member joins
        ScenarioThreads.runAll(args, "share-", TAG, ShareScenarios::run, ShareScenarios::emit, Set.of("config"));
    }

    static void run(String scenario, String[] a) throws Exception {
        switch (scenario) {
            case "config": config(a[0], a[1]); break;
            case "member": member(a[0], a[1], a[2], a[3], Long.parseLong(a[4]), Long.parseLong(a[5])); break;
            default: throw new IllegalArgumentException(scenario);
        }
    }

    static void config(String group, String pairs) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            Collection<AlterConfigOp> ops = new ArrayList<>();
            for (String kv : pairs.split(",")) {
                String[] parts = kv.split("=", 2);
                ops.add(new AlterConfigOp(new ConfigEntry(parts[0], parts[1]), AlterConfigOp.OpType.SET));
            }
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops)).all().get();
        }
    }

    static void member(String topic, String group, String mode, String plan, long idleMs, long maxMs) {
        Map<String, String> actions = new HashMap<>();
        long stallMs = 0;
        long pauseAfter = -1;
        String after = null;
        long delivered = 0;
        for (String item : plan.split(",")) {
            if (item.startsWith("stallMs=")) {
                stallMs = Long.parseLong(item.substring(8));
            } else if (item.startsWith("after=")) {  // join only once that member closed
                after = item.substring(6);
            } else if (item.startsWith("pauseAfter=")) {
                pauseAfter = Long.parseLong(item.substring(11));
            } else if (item.contains("=")) {
                String[] kv = item.split("=", 2);
                actions.put(kv[0], kv[1]);
            }
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", mode);
        Set<String> acted = new HashSet<>();
        if (after != null) {
            try {
                if (!latch(after).await(maxMs, java.util.concurrent.TimeUnit.MILLISECONDS)) {
                    throw new IllegalStateException(after + " did not close");
                }
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        }
        KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(p);
        boolean closed = false;
        try {
            consumer.subscribe(List.of(topic));
            long start = System.currentTimeMillis();
            long last = -1;  // idleMs counts from the last record, once one came
            while ((last < 0 || System.currentTimeMillis() - last < idleMs) && System.currentTimeMillis() - start < maxMs) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                last = System.currentTimeMillis();
                boolean closeNow = false;
                for (ConsumerRecord<String, String> r : records) {
                    String action = "accept";
                    for (Map.Entry<String, String> e : actions.entrySet()) {
                        if (!r.value().endsWith(e.getKey())) continue;
                        if (e.getValue().equals("release-always")) action = "release";
                        else if (!acted.contains(r.value())) action = e.getValue();
                    }
                    if (!action.equals("accept")) acted.add(r.value());
                    emit("value", r.value(), "partition", r.partition(), "offset", r.offset(),
                         "delivery", r.deliveryCount().map(Short::intValue).orElse(-1), "action", action);
                    if (mode.equals("explicit")) {
                        switch (action) {
                            case "accept": consumer.acknowledge(r, AcknowledgeType.ACCEPT); break;
                            case "release": consumer.acknowledge(r, AcknowledgeType.RELEASE); break;
                            case "reject": consumer.acknowledge(r, AcknowledgeType.REJECT); break;
                            case "renew":  // KIP-1222: keep the lock; the next poll returns it again
                                consumer.acknowledge(r, AcknowledgeType.RENEW);
                                break;
                            case "stall":  // hold it past its lock (stall=ms in the plan's "stallMs"), then accept
                                sleep(stallMs);
                                consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                                break;
                            case "close": closeNow = true; break;
                            default: throw new IllegalArgumentException(action);
                        }
                    } else if (action.equals("close")) {
                        closeNow = true;
                    }
                }
                if (closeNow) {
                    emit("closing", true);
                    consumer.close(Duration.ofSeconds(10));
                    closed = true;
                    latch(TAG.get()).countDown();
                    return;
                }
                if (mode.equals("explicit")) {
                    Map<?, ?> results = consumer.commitSync();
                    for (Map.Entry<?, ?> e : results.entrySet()) {
                        if (((java.util.Optional<?>) e.getValue()).isPresent()) {
                            emit("commit_error", e.getKey().toString() + ": " + e.getValue().toString());
                        }
                    }
                }
                delivered += records.count();
                if (pauseAfter >= 0 && delivered >= pauseAfter) {  // acknowledged: the test kills the broker now
                    pauseAfter = -1;
                    emit("pause", delivered);
                    try {
                        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
                    } catch (java.io.IOException e) {
                        throw new RuntimeException(e);
                    }
                    last = System.currentTimeMillis();
                }
            }
        } finally {
            if (!closed) consumer.close(Duration.ofSeconds(10));
        }
    }

    static final Map<String, java.util.concurrent.CountDownLatch> CLOSED = new java.util.concurrent.ConcurrentHashMap<>();

    static java.util.concurrent.CountDownLatch latch(String tag) {
        return CLOSED.computeIfAbsent(tag, k -> new java.util.concurrent.CountDownLatch(1));
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    static synchronized void emit(Object... kv) {
        StringBuilder b = new StringBuilder("{\"scenario\":\"").append(TAG.get()).append('"');
        for (int i = 0; i < kv.length; i += 2) {
            b.append(",\"").append(kv[i]).append("\":");
            Object v = kv[i + 1];
            if (v instanceof Number || v instanceof Boolean) b.append(v);
            else b.append('"').append(String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"")
                    .replace("\n", "\\n").replace("\t", "\\t")).append('"');
        }
        System.out.println(b.append('}'));
        System.out.flush();
    }
}
