"""EndTxn v5 (KIP-890 part 2, transaction version 2) after an AddOffsetsToTxn (a version 1 start, as
librdkafka or an older Java client would make, then a v5 end): both brokers finalize `transaction.version`
2, bump the producer epoch at the end of the transaction and answer the new epoch; the old one is fenced
(PRODUCER_FENCED). tests/differential/test_txn_v2.py has the whole version 2 sequences."""

from __future__ import annotations

import uuid

from tests.differential.groups_wire import Txn, call, coordinator_ready, retry

PRODUCER_FENCED = 90


def end_with_v5(side) -> dict:
    group = f"gev5-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    txn = Txn(side)
    assert txn.add_offsets(group) == 0
    answer = retry(side, 26, 5, transactional_id=txn.txn_id, producer_id=txn.pid, producer_epoch=txn.epoch,
                   committed=True)
    again = retry(side, 25, 3, transactional_id=txn.txn_id, producer_id=txn.pid, producer_epoch=txn.epoch,
                  group_id=group)["error_code"]
    versions = call(side, 18, 3, client_software_name="differential", client_software_version="1")
    features = {f["name"]: f["max_version_level"] for f in versions["finalized_features"]}
    return {"error": answer["error_code"], "same producer id": answer["producer_id"] == txn.pid,
            "epoch bump": answer["producer_epoch"] - txn.epoch, "old epoch afterwards": again,
            "transaction.version": features.get("transaction.version")}


def test_end_txn_v5_bumps_the_epoch(both):
    c, k = both.run(end_with_v5)
    assert c == k == {"error": 0, "same producer id": True, "epoch bump": 1, "old epoch afterwards": PRODUCER_FENCED,
                      "transaction.version": 2}
