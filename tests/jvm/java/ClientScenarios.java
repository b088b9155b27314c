// Kafka's Java client, unmodified, through the scenarios a user runs: idempotent and transactional
// producers, consumer groups (classic and KIP-848), static membership, cooperative rebalancing,
// offsetsForTimes and seek by time. One JVM runs them all at once, each on a thread of its own with its
// own topic and group (they mostly wait on rebalances: together they take about as long as the longest),
// and prints JSON lines tagged with the scenario, which the Python test reads.
// Args: bootstrap spec... where a spec is "tag;scenario;arg;arg..."
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Future;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ClientScenarios {
    static String bootstrap;
    static final ThreadLocal<String> TAG = new ThreadLocal<>();

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        ScenarioThreads.runAll(args, "scenario-", TAG, ClientScenarios::run, ClientScenarios::emit, Set.of());
        System.out.flush();
        System.exit(0);  // the clients' threads are closed; nothing else may keep the JVM up
    }

    static void run(String scenario, String[] a) throws Exception {
        switch (scenario) {
            case "idempotent" -> idempotent(a[0], Integer.parseInt(a[1]), Long.parseLong(a[2]));
            case "transactions" -> transactions(a[0], a[1]);
            case "idempotent-crash" -> idempotentCrash(a[0], Integer.parseInt(a[1]));
            case "group" -> group(a[0], a[1], a[2]);
            case "static" -> staticMembership(a[0], a[1], a[2]);
            case "cooperative" -> cooperative(a[0], a[1], a[2]);
            case "zombie" -> zombie(a[0], a[1], a[2]);
            case "times" -> times(a[0], a[1]);
            case "duration" -> byDuration(a[0], a[1]);
            case "pattern" -> pattern(a[0], a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]));
            default -> throw new IllegalArgumentException("no scenario " + scenario);
        }
    }

    // -- the scenarios ----------------------------------------------------------------------------

    /** n records with keys, headers and CreateTime timestamps (base + a permutation of i) through an
     *  idempotent producer with 5 requests in flight, then read back read_committed. */
    static void idempotent(String topic, int n, long base) throws Exception {
        Properties p = producerProps();
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("linger.ms", "2");
        p.put("batch.size", "2048");  // many batches in flight at once: the sequence numbers matter
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                long ts = base + (long) ((i * 7919L) % n) * 1000;
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, null, ts, "k" + i, "v" + i);
                r.headers().add("seq", Integer.toString(i).getBytes()).add("src", "java".getBytes());
                sent.add(producer.send(r));
            }
            for (int i = 0; i < n; i++) {
                RecordMetadata m = sent.get(i).get();
                emit("sent", i, "partition", m.partition(), "offset", m.offset(), "timestamp", m.timestamp());
            }
        }
        for (ConsumerRecord<String, String> r : readAll(topic, "read_committed")) emit(record(r));
    }

    /** An idempotent producer whose broker is killed and restarted while it sends: the first half is sent
     *  (not waited for), the test kills the broker when told, and answers on stdin once it is back. */
    static void idempotentCrash(String topic, int n) throws Exception {
        Properties p = producerProps();
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("linger.ms", "1");
        p.put("batch.size", "1024");
        p.put("reconnect.backoff.max.ms", "200");  // back soon after the restart
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
            for (int i = 0; i < n; i++) {
                if (i == n / 4) emit("kill", i);  // the test kills the broker now, batches in flight
                if (i == n / 2) {
                    emit("paused", i);
                    in.readLine();
                }
                sent.add(producer.send(new ProducerRecord<>(topic, i % 2, "k" + i, "v" + i)));
            }
            producer.flush();
        }
        List<String> errors = new ArrayList<>();
        for (Future<RecordMetadata> f : sent) {
            try {
                f.get();
            } catch (Exception e) {
                errors.add(chain(e));
            }
        }
        List<Object> values = new ArrayList<>();
        for (ConsumerRecord<String, String> r : readAll(topic, "read_committed"))
            values.add(List.of(r.partition(), r.offset(), r.value()));
        emit("errors", errors, "records", values);
    }

    /** Commit one transaction, abort one, commit another; a second producer with the same
     *  transactional.id fences the first; the second commits offsets in its transaction. */
    static void transactions(String topic, String group) throws Exception {
        String txnId = "txn-" + topic;
        KafkaProducer<String, String> first = transactional(txnId);
        first.initTransactions();
        sendTxn(first, topic, "c", 0, 5, true);
        sendTxn(first, topic, "a", 0, 5, false);
        sendTxn(first, topic, "c", 5, 10, true);
        // a transaction left open: read_committed stops before it (the last stable offset)
        KafkaProducer<String, String> open = transactional("open-" + topic);
        open.initTransactions();
        open.beginTransaction();
        open.send(new ProducerRecord<>(topic, 0, "o", "o0")).get();
        emit("open_end_committed", endOffsets(topic, "read_committed"), "open_end_uncommitted",
             endOffsets(topic, "read_uncommitted"));
        open.abortTransaction();
        open.close();

        KafkaProducer<String, String> second = transactional(txnId);
        second.initTransactions();  // bumps the epoch: the first producer is fenced
        // What the fenced producer is told depends on the transaction version: with TV2 (Kafka 4.4) its
        // produce fails with InvalidProducerEpochException and the abort that follows is fenced; with TV1
        // AddPartitionsToTxn fences it at once. Both end in ProducerFencedException.
        List<String> fenced = new ArrayList<>();
        try {
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, "z", "z0")).get();
            first.commitTransaction();
        } catch (Exception e) {
            fenced.add(chain(e));
            try {
                first.abortTransaction();
            } catch (Exception again) {
                fenced.add(chain(again));
            }
        }
        emit("fenced", fenced);
        first.close(Duration.ZERO);

        second.beginTransaction();
        second.send(new ProducerRecord<>(topic, 0, "d", "d0")).get();
        TopicPartition tp = new TopicPartition(topic, 0);
        second.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(7, "in-txn")),
                                        new ConsumerGroupMetadata(group));
        second.commitTransaction();
        second.close();

        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            List<String> values = new ArrayList<>();
            for (ConsumerRecord<String, String> r : readAll(topic, isolation)) values.add(r.value());
            emit("isolation", isolation, "values", values, "end", endOffsets(topic, isolation));
        }
        try (KafkaConsumer<String, String> c = consumer(group, "classic", Map.of())) {
            OffsetAndMetadata om = c.committed(Set.of(tp), Duration.ofSeconds(30)).get(tp);
            emit("committed", om == null ? null : om.offset(), "metadata", om == null ? null : om.metadata());
        }
    }

    /** Two members of one group split the partitions and commit what they read; a third member
     *  then reads from the committed positions only what came after. */
    static void group(String topic, String group, String protocol) throws Exception {
        int parts = partitions(topic).size();
        Member a = new Member("a", consumer(group, protocol, Map.of()), topic, true).start();
        Member b = new Member("b", consumer(group, protocol, Map.of()), topic, true).start();
        waitFor("two members splitting " + parts + " partitions", () -> split(parts, a, b));
        emit("split", Map.of("a", a.assignment(), "b", b.assignment()));
        produce(topic, parts, 10, "first");
        waitFor("both members reading the first batch", () -> a.records.size() + b.records.size() >= parts * 10);
        // the members commit after each poll that returned records; wait until the last commit is done
        waitFor("the members committing", () -> a.committedAll && b.committedAll);
        // what each owns now, before one leaving gives the other everything
        for (Member m : List.of(a, b))
            emit("member", m.name, "assignment", m.assignment(), "records", m.partitionsRead(),
                 "count", m.records.size());
        a.running = b.running = false;
        a.stop();
        b.stop();
        produce(topic, parts, 5, "second");
        Member c = new Member("c", consumer(group, protocol, Map.of()), topic, false).start();
        waitFor("the third member reading the second batch", () -> c.records.size() >= parts * 5);
        c.stop();
        List<Object> seen = new ArrayList<>();
        for (ConsumerRecord<String, String> r : c.records) seen.add(List.of(r.partition(), r.offset(), r.value()));
        emit("member", "c", "records", seen);
    }

    /** Two static members; one closes (a static member does not leave) and a new consumer with the same
     *  group.instance.id takes its place: same partitions, and the other member sees no rebalance. */
    static void staticMembership(String topic, String group, String protocol) throws Exception {
        int parts = partitions(topic).size();
        Member a = new Member("a", consumer(group, protocol, statics("a")), topic, false).start();
        Member b = new Member("b", consumer(group, protocol, statics("b")), topic, false).start();
        waitFor("two static members splitting the partitions", () -> split(parts, a, b));
        int genB = b.generation, seenB = b.events.size();
        emit("before", Map.of("a", a.assignment(), "b", b.assignment(), "gen_a", a.generation, "gen_b", genB));
        a.stop();
        Member a2 = new Member("a2", consumer(group, protocol, statics("a")), topic, false).start();
        waitFor("the restarted member getting partitions", () -> !a2.assignment().isEmpty());
        produce(topic, parts, 1, "after");
        waitFor("both members reading after the restart", () -> a2.records.size() + b.records.size() >= parts);
        // b's callbacks since the split: none, if replacing a did not rebalance the group
        Map<String, Object> now = Map.of("a2", a2.assignment(), "b", b.assignment(), "gen_a2", a2.generation,
                                         "gen_b", b.generation, "events_b", new ArrayList<>(b.events.subList(seenB, b.events.size())));
        a2.running = b.running = false;
        a2.stop();
        b.stop();
        emit("after", now,
             "events_a2", a2.events, "events_a", a.events);
    }

    /** A second consumer started with the group.instance.id of a member still running (a zombie, or a
     *  mistake): with the classic protocol the newcomer takes the place and the old one is fenced
     *  (FencedInstanceIdException); with the consumer protocol the newcomer is refused
     *  (UnreleasedInstanceIdException) and the old one stays. Either way the group goes on undisturbed. */
    static void zombie(String topic, String group, String protocol) throws Exception {
        int parts = partitions(topic).size();
        Member a = new Member("a", consumer(group, protocol, statics("a")), topic, false).start();
        Member b = new Member("b", consumer(group, protocol, statics("b")), topic, false).start();
        waitFor("two static members splitting the partitions", () -> split(parts, a, b));
        List<Integer> ownedA = a.assignment(), ownedB = b.assignment();
        Member a2 = new Member("a2", consumer(group, protocol, statics("a")), topic, false).start();
        waitFor("one of the two with instance id a failing", () -> a.failed != null || a2.failed != null);
        Member alive = a.failed != null ? a2 : a;
        waitFor("the one left owning partitions", () -> !alive.owned.isEmpty());
        produce(topic, parts, 1, "after");
        waitFor("the one left and b reading", () -> alive.records.size() + b.records.size() >= parts);
        Map<String, Object> now = new LinkedHashMap<>();
        now.put("a", ownedA);
        now.put("b_before", ownedB);
        now.put("alive", alive.name);
        now.put("alive_owns", alive.assignment());
        now.put("b", b.assignment());
        now.put("a_failed", chain(a.failed));
        now.put("a2_failed", chain(a2.failed));
        alive.running = b.running = false;
        alive.stop();
        b.stop();
        emit("zombie", now);
    }

    /** CooperativeStickyAssignor (or the consumer protocol): a second member joining takes only the
     *  partitions that move, and the first member keeps (is never revoked) the rest. */
    static void cooperative(String topic, String group, String protocol) throws Exception {
        int parts = partitions(topic).size();
        // the consumer protocol (KIP-848) is incremental by design: the broker assigns, no strategy to set
        Map<String, Object> coop = protocol.equals("classic") ? Map.of("partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor") : Map.of();
        Member a = new Member("a", consumer(group, protocol, coop), topic, false).start();
        waitFor("the first member owning every partition", () -> a.assignment().size() == parts);
        Member b = new Member("b", consumer(group, protocol, coop), topic, false).start();
        waitFor("two members splitting the partitions", () -> split(parts, a, b));
        produce(topic, parts, 1, "after");
        waitFor("both members reading", () -> a.records.size() + b.records.size() >= parts);
        // what each owns and the callbacks so far, before closing revokes the rest
        List<Integer> ownedA = a.assignment(), ownedB = b.assignment();
        List<Object> eventsA = new ArrayList<>(a.events), eventsB = new ArrayList<>(b.events);
        a.running = b.running = false;
        a.stop();
        b.stop();
        emit("a", ownedA, "b", ownedB, "events_a", eventsA, "events_b", eventsB);
    }

    /** offsetsForTimes for each target and partition, then a consumer seeking there: the first record
     *  it reads. Also the admin's ListOffsets by timestamp and max-timestamp. */
    static void times(String topic, String targetList) throws Exception {
        List<TopicPartition> tps = partitions(topic);
        try (KafkaConsumer<String, String> c = plainConsumer("read_uncommitted");
             Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            c.assign(tps);
            for (String s : targetList.split(",")) {
                long target = Long.parseLong(s);
                Map<TopicPartition, Long> query = new HashMap<>();
                for (TopicPartition tp : tps) query.put(tp, target);
                Map<TopicPartition, OffsetAndTimestamp> found = c.offsetsForTimes(query, Duration.ofSeconds(30));
                Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
                for (TopicPartition tp : tps) specs.put(tp, OffsetSpec.forTimestamp(target));
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> byAdmin =
                    admin.listOffsets(specs).all().get();
                for (TopicPartition tp : tps) {
                    OffsetAndTimestamp ot = found.get(tp);
                    // seek by time: to the answered offset, or to the end when no record is that late
                    if (ot != null) c.seek(tp, ot.offset()); else c.seekToEnd(List.of(tp));
                }
                Map<TopicPartition, ConsumerRecord<String, String>> first = firstRecords(c, tps, found);
                for (TopicPartition tp : tps) {
                    OffsetAndTimestamp ot = found.get(tp);
                    ConsumerRecord<String, String> r = first.get(tp);
                    ListOffsetsResult.ListOffsetsResultInfo ai = byAdmin.get(tp);
                    emit("target", target, "partition", tp.partition(),
                         "offset", ot == null ? null : ot.offset(), "timestamp", ot == null ? null : ot.timestamp(),
                         "first_offset", r == null ? null : r.offset(), "first_ts", r == null ? null : r.timestamp(),
                         "position", c.position(tp), "admin_offset", ai.offset(), "admin_ts", ai.timestamp());
                }
            }
            Map<TopicPartition, OffsetSpec> max = new HashMap<>();
            for (TopicPartition tp : tps) max.put(tp, OffsetSpec.maxTimestamp());
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> got = admin.listOffsets(max).all().get();
            for (TopicPartition tp : tps)
                emit("max_timestamp", got.get(tp).timestamp(), "partition", tp.partition(),
                     "offset", got.get(tp).offset());
        }
    }

    /** auto.offset.reset=by_duration (KIP-1106): a consumer without a position starts at the first record
     *  no older than the duration, found with ListOffsets by timestamp. */
    static void byDuration(String topic, String duration) throws Exception {
        Properties p = new Properties();
        p.put("auto.offset.reset", "by_duration:" + duration);
        List<TopicPartition> tps = partitions(topic);
        try (KafkaConsumer<String, String> c = plainConsumer("read_uncommitted", p)) {
            long asked = System.currentTimeMillis();
            c.assign(tps);
            Map<String, Long> positions = new java.util.TreeMap<>();
            for (TopicPartition tp : tps) positions.put(Integer.toString(tp.partition()), c.position(tp));
            emit("positions", positions, "asked_at", asked, "answered_at", System.currentTimeMillis());
        }
    }

    /** A consumer-protocol member subscribed by a server-side regular expression (SubscriptionPattern,
     *  KIP-848): the topics that match, and a matching topic created later, are assigned. */
    static void pattern(String prefix, String group, int before, int after) throws Exception {
        try (KafkaConsumer<String, String> c = consumer(group, "consumer", Map.of());
             Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            c.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(prefix + "-m.*"));
            waitFor("the matching topics assigned", () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().size() >= before;
            });
            emit("before", names(c.assignment()));
            admin.createTopics(List.of(new org.apache.kafka.clients.admin.NewTopic(prefix + "-m3", 2, (short) 1)))
                .all().get();
            waitFor("the new matching topic assigned", () -> {
                c.poll(Duration.ofMillis(100));
                return c.assignment().size() >= after;
            });
            emit("after", names(c.assignment()));
        }
    }

    static List<String> names(Set<TopicPartition> tps) {
        Set<String> s = new TreeSet<>();
        for (TopicPartition tp : tps) s.add(tp.topic() + ":" + tp.partition());
        return new ArrayList<>(s);
    }

    // -- a group member on a thread of its own ----------------------------------------------------

    static final class Member implements Runnable {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final String topic;
        final boolean commit;
        final List<ConsumerRecord<String, String>> records = new CopyOnWriteArrayList<>();
        final List<Object> events = new CopyOnWriteArrayList<>();
        volatile Set<Integer> owned = new TreeSet<>();
        volatile List<Integer> lastAssignment = List.of();
        volatile int generation = -1;
        volatile boolean committedAll = true;
        volatile boolean running = true;
        volatile Throwable failed;
        final Thread thread;

        Member(String name, KafkaConsumer<String, String> consumer, String topic, boolean commit) {
            this.name = name;
            this.consumer = consumer;
            this.topic = topic;
            this.commit = commit;
            this.thread = new Thread(this, "member-" + name);
        }

        Member start() {
            thread.start();
            return this;
        }

        List<Integer> assignment() {
            if (failed != null) throw new RuntimeException("member " + name + " failed", failed);
            return new ArrayList<>(owned);
        }

        List<Integer> partitionsRead() {
            Set<Integer> s = new TreeSet<>();
            for (ConsumerRecord<String, String> r : records) s.add(r.partition());
            return new ArrayList<>(s);
        }

        void stop() throws InterruptedException {
            running = false;
            thread.join(60_000);
            if (thread.isAlive()) throw new IllegalStateException("member " + name + " did not stop");
            if (failed != null) throw new RuntimeException("member " + name + " failed", failed);
        }

        public void run() {
            try {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> ps) { event("revoked", ps); }
                    public void onPartitionsAssigned(Collection<TopicPartition> ps) { event("assigned", ps); }
                    public void onPartitionsLost(Collection<TopicPartition> ps) { event("lost", ps); }
                });
                while (running) {
                    ConsumerRecords<String, String> got = consumer.poll(Duration.ofMillis(100));
                    // not committed yet before the records count: whoever sees them all waits for the commit
                    if (commit && !got.isEmpty()) committedAll = false;
                    for (ConsumerRecord<String, String> r : got) records.add(r);
                    if (commit && !got.isEmpty()) {
                        consumer.commitSync();
                        committedAll = true;
                    }
                    generation = consumer.groupMetadata().generationId();
                    publish();
                }
                lastAssignment = new ArrayList<>(owned);
            } catch (Throwable t) {
                failed = t;
            } finally {
                consumer.close();
            }
        }

        private void publish() {
            Set<Integer> now = new TreeSet<>();
            for (TopicPartition tp : consumer.assignment()) now.add(tp.partition());
            owned = now;
        }

        private void event(String kind, Collection<TopicPartition> ps) {
            Set<Integer> s = new TreeSet<>();
            for (TopicPartition tp : ps) s.add(tp.partition());
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("kind", kind);
            e.put("partitions", new ArrayList<>(s));
            e.put("generation", consumer.groupMetadata().generationId());
            events.add(e);
        }
    }

    static boolean split(int parts, Member a, Member b) {
        List<Integer> x = a.assignment(), y = b.assignment();
        Set<Integer> all = new TreeSet<>(x);
        all.addAll(y);
        return !x.isEmpty() && !y.isEmpty() && x.size() + y.size() == parts && all.size() == parts;
    }

    // -- clients ----------------------------------------------------------------------------------

    static Properties producerProps() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return p;
    }

    static KafkaProducer<String, String> transactional(String id) {
        Properties p = producerProps();
        p.put("transactional.id", id);
        p.put("transaction.timeout.ms", "60000");
        return new KafkaProducer<>(p);
    }

    static void sendTxn(KafkaProducer<String, String> p, String topic, String prefix, int from, int to,
                        boolean commit) throws Exception {
        p.beginTransaction();
        for (int i = from; i < to; i++) p.send(new ProducerRecord<>(topic, i % 2, prefix, prefix + i));
        p.flush();
        if (commit) p.commitTransaction(); else p.abortTransaction();
    }

    static void produce(String topic, int parts, int perPartition, String prefix) throws Exception {
        try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps())) {
            for (int part = 0; part < parts; part++)
                for (int i = 0; i < perPartition; i++)
                    p.send(new ProducerRecord<>(topic, part, "k", prefix + "-" + part + "-" + i));
            p.flush();
        }
    }

    static Map<String, Object> statics(String instance) {
        return Map.of("group.instance.id", instance);
    }

    static KafkaConsumer<String, String> consumer(String group, String protocol, Map<String, Object> extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        if (protocol.equals("classic")) {
            // the member learns of a rebalance on its next heartbeat: ask often, as Kafka's own tests do
            p.put("heartbeat.interval.ms", "300");
            p.put("session.timeout.ms", "10000");
        }
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static KafkaConsumer<String, String> plainConsumer(String isolation) {
        return plainConsumer(isolation, new Properties());
    }

    static KafkaConsumer<String, String> plainConsumer(String isolation, Properties extra) {
        Properties p = new Properties();
        p.putAll(extra);
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("isolation.level", isolation);
        p.put("fetch.max.wait.ms", "50");  // a partition at its end answers at once: reads to the end are quick
        p.put("enable.auto.commit", "false");
        return new KafkaConsumer<>(p);
    }

    static List<TopicPartition> partitions(String topic) {
        try (KafkaConsumer<String, String> c = plainConsumer("read_uncommitted")) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30)))
                tps.add(new TopicPartition(topic, pi.partition()));
            tps.sort((x, y) -> Integer.compare(x.partition(), y.partition()));
            return tps;
        }
    }

    static Map<String, Long> endOffsets(String topic, String isolation) {
        try (KafkaConsumer<String, String> c = plainConsumer(isolation)) {
            Map<String, Long> out = new java.util.TreeMap<>();
            c.endOffsets(partitions(topic), Duration.ofSeconds(30))
                .forEach((tp, o) -> out.put(Integer.toString(tp.partition()), o));
            return out;
        }
    }

    /** Every record of the topic, from the start to the end offsets the consumer sees at its isolation. */
    static List<ConsumerRecord<String, String>> readAll(String topic, String isolation) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = plainConsumer(isolation)) {
            List<TopicPartition> tps = partitions(topic);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(30));
            waitFor("reading " + topic + " to its end", () -> {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) out.add(r);
                for (TopicPartition tp : tps) if (c.position(tp) < ends.get(tp)) return false;
                return true;
            });
        }
        return out;
    }

    /** The first record at each partition's position (none for a partition positioned at its end). */
    static Map<TopicPartition, ConsumerRecord<String, String>> firstRecords(
            KafkaConsumer<String, String> c, List<TopicPartition> tps, Map<TopicPartition, OffsetAndTimestamp> found) {
        Map<TopicPartition, ConsumerRecord<String, String>> first = new HashMap<>();
        Set<TopicPartition> todo = new java.util.HashSet<>();
        for (TopicPartition tp : tps) if (found.get(tp) != null) todo.add(tp);
        waitFor("the first records after the seeks", () -> {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                if (todo.remove(tp)) first.put(tp, r);
            }
            return todo.isEmpty();
        });
        // back to the answered offsets, so the reported positions are those of the seek
        for (TopicPartition tp : tps) {
            OffsetAndTimestamp ot = found.get(tp);
            if (ot != null) c.seek(tp, ot.offset()); else c.seekToEnd(List.of(tp));
        }
        return first;
    }

    static void waitFor(String what, BooleanSupplier done) {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("timed out: " + what);
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        }
    }

    static String chain(Throwable e) {
        StringBuilder sb = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (sb.length() > 0) sb.append(" <- ");
            sb.append(t.getClass().getSimpleName());
        }
        return sb.toString();
    }

    // -- JSON out ---------------------------------------------------------------------------------

    static Map<String, Object> record(ConsumerRecord<String, String> r) {
        Map<String, Object> h = new LinkedHashMap<>();
        for (Header x : r.headers()) h.put(x.key(), new String(x.value()));
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("key", r.key());
        m.put("value", r.value());
        m.put("timestamp", r.timestamp());
        m.put("timestamp_type", r.timestampType().name);
        m.put("headers", h);
        return m;
    }

    static synchronized void emit(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        emit(m);
    }

    static synchronized void emit(Map<String, Object> m) {
        Map<String, Object> tagged = new LinkedHashMap<>();
        tagged.put("scenario", TAG.get());
        tagged.putAll(m);
        StringBuilder sb = new StringBuilder();
        json(sb, tagged);
        System.out.println(sb);
    }

    static void json(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map<?, ?> m) {
            sb.append('{');
            boolean firstKey = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!firstKey) sb.append(',');
                firstKey = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection<?> c) {
            sb.append('[');
            boolean firstItem = true;
            for (Object x : c) {
                if (!firstItem) sb.append(',');
                firstItem = false;
                json(sb, x);
            }
            sb.append(']');
        } else {
            sb.append('"');
            for (char ch : o.toString().toCharArray()) {
                if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
                else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                else sb.append(ch);
            }
            sb.append('"');
        }
    }
}
