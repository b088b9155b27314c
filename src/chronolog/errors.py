"""Kafka's error codes as one table, and the exceptions that carry them.

The numbers are the wire values of `org.apache.kafka.common.protocol.Errors`. Every layer raises a
`KafkaError` subclass so that the protocol layer can answer with the right code without knowing which
layer failed; anything else escaping a handler is answered as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Wire error codes (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTION_ABORTABLE = 120  # KIP-890 part 1
    INVALID_RECORD_STATE = 121  # share groups (KIP-932)
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129


RETRIABLE: frozenset[ErrorCode] = frozenset({
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
})


class ChronologError(Exception):
    """Base of every error chronolog raises on purpose."""


class KafkaError(ChronologError):
    """An error with a Kafka wire code; the message is what a client or a CLI user sees. `record_errors`
    are Kafka's `RecordValidationException` ones (KIP-467): (index of the record in its batch, message),
    which Produce v8+ answers per partition."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    record_errors: tuple[tuple[int, str], ...] = ()

    def __init__(self, message: str = "", *, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class UnknownServerErrorError(KafkaError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(KafkaError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidFetchSizeError(KafkaError):
    code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(KafkaError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(KafkaError):
    code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(KafkaError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(KafkaError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE


class MessageTooLargeError(KafkaError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class StaleControllerEpochError(KafkaError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(KafkaError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkExceptionError(KafkaError):
    code = ErrorCode.NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(KafkaError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicExceptionError(KafkaError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(KafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(KafkaError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(KafkaError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(KafkaError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(KafkaError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(KafkaError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(KafkaError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(KafkaError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(KafkaError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(KafkaError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(KafkaError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(KafkaError):
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedSaslMechanismError(KafkaError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(KafkaError):
    code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(KafkaError):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(KafkaError):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(KafkaError):
    code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(KafkaError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(KafkaError):
    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(KafkaError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(KafkaError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(KafkaError):
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(KafkaError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(KafkaError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(KafkaError):
    code = ErrorCode.SECURITY_DISABLED


class OperationNotAttemptedError(KafkaError):
    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class KafkaStorageErrorError(KafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class LogDirNotFoundError(KafkaError):
    code = ErrorCode.LOG_DIR_NOT_FOUND


class SaslAuthenticationFailedError(KafkaError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class ReassignmentInProgressError(KafkaError):
    code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class DelegationTokenAuthDisabledError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


class DelegationTokenNotFoundError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_NOT_FOUND


class DelegationTokenOwnerMismatchError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH


class DelegationTokenRequestNotAllowedError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


class DelegationTokenAuthorizationFailedError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED


class DelegationTokenExpiredError(KafkaError):
    code = ErrorCode.DELEGATION_TOKEN_EXPIRED


class InvalidPrincipalTypeError(KafkaError):
    code = ErrorCode.INVALID_PRINCIPAL_TYPE


class NonEmptyGroupError(KafkaError):
    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(KafkaError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class FetchSessionIdNotFoundError(KafkaError):
    code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND


class InvalidFetchSessionEpochError(KafkaError):
    code = ErrorCode.INVALID_FETCH_SESSION_EPOCH


class ListenerNotFoundError(KafkaError):
    code = ErrorCode.LISTENER_NOT_FOUND


class TopicDeletionDisabledError(KafkaError):
    code = ErrorCode.TOPIC_DELETION_DISABLED


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class UnsupportedCompressionTypeError(KafkaError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class StaleBrokerEpochError(KafkaError):
    code = ErrorCode.STALE_BROKER_EPOCH


class OffsetNotAvailableError(KafkaError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE


class MemberIdRequiredError(KafkaError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class PreferredLeaderNotAvailableError(KafkaError):
    code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class GroupMaxSizeReachedError(KafkaError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.FENCED_INSTANCE_ID


class EligibleLeadersNotAvailableError(KafkaError):
    code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


class ElectionNotNeededError(KafkaError):
    code = ErrorCode.ELECTION_NOT_NEEDED


class NoReassignmentInProgressError(KafkaError):
    code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class GroupSubscribedToTopicError(KafkaError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class InvalidRecordError(KafkaError):
    code = ErrorCode.INVALID_RECORD


class UnstableOffsetCommitError(KafkaError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT


class ThrottlingQuotaExceededError(KafkaError):
    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


class ProducerFencedError(KafkaError):
    code = ErrorCode.PRODUCER_FENCED


class ResourceNotFoundError(KafkaError):
    code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(KafkaError):
    code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(KafkaError):
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.UNKNOWN_TOPIC_ID


_BY_CODE: dict[int, type[KafkaError]] = {cls.code.value: cls for cls in KafkaError.__subclasses__()}


def error_for_code(code: int, message: str = "") -> KafkaError:
    """The exception for a wire code (KafkaError with that code if the code is unknown to us)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    try:
        return KafkaError(message, code=ErrorCode(code))
    except ValueError:
        return KafkaError(message or f"error code {code}")
