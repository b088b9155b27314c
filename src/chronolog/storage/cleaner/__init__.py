"""Log compaction, along Kafka's split: the offset map (`SkimpyOffsetMap`), the choice of the log to clean
and its range (`LogCleanerManager`), the transaction rules (`CleanedTransactionMetadata`) and the cleaning
itself (`Cleaner`), with the files it reads and writes. docs/compaction.md describes the design."""

from chronolog.storage.cleaner.cleaning import Cleaner, CleaningAbortedError, group_segments
from chronolog.storage.cleaner.files import CleanerStats, Throttler
from chronolog.storage.cleaner.manager import (
    CLEANER_CHECKPOINT,
    LogToClean,
    choose_log,
    cleanable_offsets,
    log_to_clean,
    max_compaction_delay,
)
from chronolog.storage.cleaner.offset_map import OffsetMap, new_offset_map
from chronolog.storage.cleaner.transactions import CleanedTransactionMetadata

__all__ = ["CLEANER_CHECKPOINT", "CleanedTransactionMetadata", "Cleaner", "CleanerStats", "CleaningAbortedError",
           "LogToClean", "OffsetMap", "Throttler", "choose_log", "cleanable_offsets", "group_segments",
           "log_to_clean", "max_compaction_delay", "new_offset_map"]
