// An exactly-once consume-transform-produce loop through Kafka's Java client, as its docs write one
// (KafkaProducer#sendOffsetsToTransaction with the consumer's group metadata, KIP-447): a read_committed
// consumer of a group (group.protocol classic or consumer, KIP-848), a transactional producer, each
// batch's output and the consumer's positions committed in one transaction; on an abortable error the
// transaction is aborted and the consumer rewound to the group's committed offsets.
//
// Usage: EosApp BOOTSTRAP GROUP_PROTOCOL GROUP IN_TOPIC OUT_TOPIC TRANSACTIONAL_ID
// Runs until killed; prints one line per committed transaction.

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosApp {
    public static void main(String[] args) {
        String bootstrap = args[0], protocol = args[1], group = args[2], in = args[3], out = args[4], txnId = args[5];
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");
        if (protocol.equals("classic")) {
            c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");  // a killed predecessor's partitions come back soon
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "10000");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            consumer.subscribe(Set.of(in));
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        byte[] value = ("out-" + new String(r.value())).getBytes();
                        producer.send(new ProducerRecord<>(out, r.partition(), r.key(), value));
                    }
                    Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
                    for (TopicPartition tp : records.partitions()) {
                        positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                    }
                    producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
                    producer.commitTransaction();
                    System.out.println("committed " + records.count());
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    throw e;  // fatal: another instance took over
                } catch (KafkaException e) {
                    System.out.println("aborted: " + e);
                    producer.abortTransaction();
                    rewind(consumer);
                }
            }
        }
    }

    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(Set.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }
}
