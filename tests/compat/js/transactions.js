// kafkajs against chronolog: a committed and an aborted transaction, then a consume-transform-produce
// step whose offsets go in with the output (sendOffsets). Prints one JSON line for the test to check.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const broker = process.argv[2];
  const kafka = new Kafka({ clientId: "compat-js", brokers: [broker], logLevel: logLevel.ERROR });
  const producer = kafka.producer({ transactionalId: "js-app", maxInFlightRequests: 1, idempotent: true });
  await producer.connect();

  let txn = await producer.transaction();
  await txn.send({ topic: "js-out", messages: [{ value: "js-committed", partition: 0 }] });
  await txn.commit();

  txn = await producer.transaction();
  await txn.send({ topic: "js-out", messages: [{ value: "js-aborted", partition: 0 }] });
  await txn.abort();

  const consumer = kafka.consumer({ groupId: "js-group", readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic: "js-in", fromBeginning: true });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${seen.length} input records arrived`)), 60000);
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        seen.push(message.value.toString());
        if (seen.length === 20) { clearTimeout(timer); resolve(); }
      },
    });
  });
  await consumer.stop();

  txn = await producer.transaction();
  await txn.send({ topic: "js-out", messages: seen.map((v) => ({ value: `y${v}`, partition: 0 })) });
  await txn.sendOffsets({ consumerGroupId: "js-group",
    topics: [{ topic: "js-in", partitions: [{ partition: 0, offset: String(seen.length) }] }] });
  await txn.commit();
  await consumer.disconnect();
  await producer.disconnect();

  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchOffsets({ groupId: "js-group", topics: ["js-in"] });
  await admin.disconnect();
  console.log(JSON.stringify({ committedOffset: offsets[0].partitions[0].offset }));
}

main().catch((err) => { console.error(err); process.exit(1); });
